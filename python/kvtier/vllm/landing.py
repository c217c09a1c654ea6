"""The keys of the vLLM connector's saves that have not landed yet: no vLLM, torch or numpy
import, so python/tests/test_vllm_landing.py checks it under plain python3.

A request's saves leave the step on the worker's saver thread. Once the request finishes, its
keys are "landing" until the worker reports it in finished_sending; a lookup whose next
missing block is one of them is deferred (vLLM asks again next step) rather than computing
what is about to be stored. A request's keys land at the latest ``wait_s`` after it finished,
so a worker that never reports does not hold other requests forever.

Not thread-safe: the connector's scheduler role uses it from vLLM's engine-core thread only.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable


class LandingSaves:
    def __init__(self, wait_s: float, clock: Callable[[], float] = time.monotonic):
        self._wait_s = wait_s
        self._clock = clock
        self._sent: dict[str, set] = {}  # running request -> keys sent to the worker to save
        self._landing: dict[str, tuple] = {}  # finished request -> (its keys, finished at)

    def sent(self, req_id: str, keys: Iterable[bytes]) -> None:
        """``keys`` are in a step's metadata for the worker to save."""
        self._sent.setdefault(req_id, set()).update(keys)

    def finished(self, req_id: str) -> bool:
        """The request finished: its keys start landing. False when it saved nothing (vLLM
        need not wait for its finished_sending)."""
        keys = self._sent.pop(req_id, None)
        if keys is None:
            return False
        self._landing[req_id] = (keys, self._clock())
        return True

    def landed(self, req_ids: Iterable[str]) -> None:
        """The worker reported these requests' puts landed (finished_sending)."""
        for req_id in req_ids:
            self._landing.pop(req_id, None)

    def is_landing(self, key: bytes) -> bool:
        """Whether ``key`` is in a finished request's save that has not landed, within the wait."""
        now = self._clock()
        return any(key in keys and now - t < self._wait_s for keys, t in self._landing.values())
