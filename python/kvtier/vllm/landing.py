"""The keys of the vLLM connector's saves that have not landed yet: no vLLM, torch or numpy
import, so python/tests/test_vllm_landing.py checks it under plain python3.

A request's saves leave the step on the worker's saver thread. Once the request finishes, its
keys are "landing" until every worker reported that its puts landed (each rank reports once,
through the connector's worker metadata); a lookup whose next missing block is one of them is
deferred (vLLM asks again next step) rather than computing what is about to be stored. A
request's keys land at the latest ``wait_s`` after it finished, so a worker that never reports
does not hold other requests forever. The request's engine blocks are not held for that: those
a save still reads are held only until its pages are copied (kvtier.vllm.pins).

Not thread-safe: the connector's scheduler role uses it from vLLM's engine-core thread only.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping


class LandingSaves:
    def __init__(self, wait_s: float, reporters: int = 1, clock: Callable[[], float] = time.monotonic):
        """``reporters``: how many workers report each finished request (the tensor-parallel
        ranks); its keys land once all of them did."""
        if reporters < 1:
            raise ValueError(f"LandingSaves: reporters must be at least 1, got {reporters}")
        self._wait_s = wait_s
        self._reporters = reporters
        self._clock = clock
        self._sent: dict[str, set] = {}  # running request -> keys sent to the worker to save
        self._landing: dict[str, list] = {}  # finished request -> [its keys, finished at, reports]

    def sent(self, req_id: str, keys: Iterable[bytes]) -> None:
        """``keys`` are in a step's metadata for the worker to save."""
        self._sent.setdefault(req_id, set()).update(keys)

    def finished(self, req_id: str) -> bool:
        """The request finished: its keys start landing. False when it saved nothing."""
        keys = self._sent.pop(req_id, None)
        if keys is None:
            return False
        self._landing[req_id] = [keys, self._clock(), 0]
        return True

    def landed(self, reports: Mapping[str, int]) -> None:
        """Workers reported these requests' puts landed: request -> how many workers did, in
        one step. Reports of requests that saved nothing, or are past their wait, are ignored."""
        for req_id, count in reports.items():
            entry = self._landing.get(req_id)
            if entry is None:
                continue
            entry[2] += count
            if entry[2] >= self._reporters:
                del self._landing[req_id]

    def is_landing(self, key: bytes) -> bool:
        """Whether ``key`` is in a finished request's save that has not landed, within the wait.
        Requests past their wait are forgotten here."""
        now = self._clock()
        expired = [r for r, (_, t, _) in self._landing.items() if now - t >= self._wait_s]
        for req_id in expired:
            del self._landing[req_id]
        return any(key in keys for keys, _, _ in self._landing.values())
