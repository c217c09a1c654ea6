"""The worker side's loads, run on one background thread (docs/vllm.md "Loads").

Two kinds of work reach the loader:

- A *step* of synchronous loads: blocks the forward that is about to run attends to. vLLM
  calls wait_for_layer_load(layer) before each attention layer, so the loader copies layer by
  layer and opens each layer's gate as soon as that layer's pages are in place: layer i+1 is
  copied while the model computes layer i. This needs the whole step in the load buffer at
  once; a step that does not fit is copied buffer-full by buffer-full and every gate opens
  at its end.
- *Asynchronous* jobs: requests vLLM parked in WAITING_FOR_REMOTE_KVS because their blocks
  sit in a slow tier. They are copied between steps, a buffer-full at a time, and a step
  that arrives meanwhile goes first. A finished job is reported once by take_finished.

No torch, vLLM or kvtier import: the copying is done by the two callbacks, so the ordering
and failure handling are tested with plain Python (python/tests/test_vllm_loader.py).

The hand-off to this thread costs about 0.3 ms a step; torch copies run here as fast as on
the calling thread. What the thread does change is process-wide: its copies start a second
OpenMP pool, and past as many pool threads as CPUs libgomp cuts every pool's spin-wait short,
the forward's included (docs/vllm.md, "The load path outside vLLM").

Thread-safety: submit, wait_layer, wait_step, take_finished and close are called by vLLM's
worker thread; fetch and unpack run only on the loader thread. State shared by the two is
guarded by self._cv.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

logger = logging.getLogger(__name__)

# fetch(keys, first_slot) -> how many of keys, from the first, were read into buffer slots
# first_slot, first_slot + 1, ...; it stops at the first block it could not read.
Fetch = Callable[[Sequence[bytes], int], int]
# unpack(layer or None for every layer, block_ids, first_slot): copies buffer slots
# [first_slot, first_slot + len(block_ids)) into those blocks' pages.
Unpack = Callable[[Optional[int], Sequence[int], int], None]


@dataclass
class LoadJob:
    req_id: str
    blocks: list  # [(block_id, key)] in chain order
    is_async: bool = False
    done: int = 0  # async jobs: blocks handled so far
    failed: list = field(default_factory=list)  # block ids that could not be loaded
    copy_seconds: float = 0.0  # the loader's time on it (a pipelined step: the whole step's)


class _Step:
    def __init__(self, jobs: list, num_layers: int):
        self.jobs = jobs
        self.layer_ready = [threading.Event() for _ in range(num_layers)]
        self.finished = threading.Event()

    def open_all(self) -> None:
        for gate in self.layer_ready:
            gate.set()
        self.finished.set()


class BlockLoader:
    def __init__(self, fetch: Fetch, unpack: Unpack, num_layers: int, buffer_slots: int,
                 pipeline_layers: bool = True):
        if buffer_slots < 1:
            raise ValueError("the load buffer holds no block; raise load_buffer_bytes")
        self._fetch = fetch
        self._unpack = unpack
        self._num_layers = num_layers
        self._slots = buffer_slots
        self._pipeline = pipeline_layers
        self._cv = threading.Condition()
        self._pending_step: Optional[_Step] = None  # submitted, not yet taken by the thread
        self._step: Optional[_Step] = None  # the step vLLM's forward is waiting on
        self._async: collections.deque = collections.deque()
        self._finished: list = []  # async jobs done, not yet reported
        self._closed = False
        self.stats = {"steps": 0, "pipelined_steps": 0, "async_jobs": 0, "blocks": 0, "failed_blocks": 0}
        self._thread = threading.Thread(target=self._run, name="kvtier-loader", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------- vLLM's worker thread
    def submit(self, sync_jobs: list, async_jobs: list) -> None:
        """Queues this step's loads. The previous step must have been waited for."""
        with self._cv:
            if self._closed:
                raise RuntimeError("the loader is closed")
            if sync_jobs:
                step = _Step(sync_jobs, self._num_layers)
                self._pending_step = self._step = step
            self._async.extend(async_jobs)
            self._cv.notify()

    def wait_layer(self, layer: int) -> None:
        step = self._step
        if step is not None and 0 <= layer < self._num_layers:
            step.layer_ready[layer].wait()

    def wait_step(self) -> list:
        """Waits for this step's synchronous loads; returns the block ids that failed."""
        step, self._step = self._step, None
        if step is None:
            return []
        step.finished.wait()
        return [b for job in step.jobs for b in job.failed]

    def take_finished(self) -> list:
        """The asynchronous jobs finished since the last call."""
        with self._cv:
            done, self._finished = self._finished, []
        return done

    def close(self) -> None:
        """Finishes the buffer-full in progress, drops what is queued, stops the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join()
        if self._step is not None:
            self._step.open_all()

    # ------------------------------------------------------------- the loader thread
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and self._pending_step is None and not self._async:
                    self._cv.wait()
                if self._closed:
                    if self._pending_step is not None:
                        self._pending_step.open_all()
                    return
                step, self._pending_step = self._pending_step, None
                job = None if step is not None else self._async[0]
            if step is not None:
                self._run_step(step)
                continue
            self._copy_chunk(job)
            if job.done >= len(job.blocks):
                with self._cv:
                    self._async.popleft()
                    self._finished.append(job)
                    self.stats["async_jobs"] += 1

    def _guarded(self, job: LoadJob, lo: int, hi: int, action: Callable[[], int]) -> int:
        """Runs a fetch or unpack of job.blocks[lo:hi]; an exception fails those blocks
        (vLLM recomputes them) instead of killing the thread and hanging the forward."""
        try:
            return action()
        except Exception:  # noqa: BLE001: anything else would leave vLLM waiting forever
            logger.exception("kvtier loader: loading %d blocks of %s failed", hi - lo, job.req_id)
            return -1

    def _fail(self, job: LoadJob, lo: int, hi: int) -> None:
        job.failed.extend(b for b, _ in job.blocks[lo:hi])
        self.stats["failed_blocks"] += hi - lo

    def _run_step(self, step: _Step) -> None:
        pipelined = self._pipeline and sum(len(j.blocks) for j in step.jobs) <= self._slots
        self.stats["steps"] += 1
        start = time.perf_counter()
        try:
            if pipelined:
                self.stats["pipelined_steps"] += 1
                self._run_step_pipelined(step)
            else:
                for job in step.jobs:
                    while job.done < len(job.blocks):
                        self._copy_chunk(job)
        finally:
            if pipelined:
                for job in step.jobs:
                    job.copy_seconds = time.perf_counter() - start
            step.open_all()

    def _run_step_pipelined(self, step: _Step) -> None:
        placed = []  # [job, first slot, ids of the blocks read and still good]
        slot = 0
        for job in step.jobs:
            keys = [k for _, k in job.blocks]
            good = max(self._guarded(job, 0, len(keys), lambda: self._fetch(keys, slot)), 0)
            self._fail(job, good, len(job.blocks))
            placed.append([job, slot, [b for b, _ in job.blocks[:good]]])
            slot += good
        for layer in range(self._num_layers):
            for entry in placed:
                job, first, ids = entry
                if ids and self._guarded(job, 0, len(ids), lambda: self._unpack(layer, ids, first) or 0) < 0:
                    self._fail(job, 0, len(ids))  # some layers of these blocks are stale: all reload
                    entry[2] = []
            step.layer_ready[layer].set()
        self.stats["blocks"] += sum(len(ids) for _, _, ids in placed)

    def _copy_chunk(self, job: LoadJob) -> None:
        """Copies the next buffer-full of job, all layers at once; a block that cannot be
        read fails the rest of the job (a chain loads as a prefix)."""
        start = time.perf_counter()
        lo = job.done
        hi = min(len(job.blocks), lo + self._slots)
        keys = [k for _, k in job.blocks[lo:hi]]
        good = max(self._guarded(job, lo, hi, lambda: self._fetch(keys, 0)), 0)
        if good:
            ids = [b for b, _ in job.blocks[lo:lo + good]]
            if self._guarded(job, lo, lo + good, lambda: self._unpack(None, ids, 0) or 0) < 0:
                good = 0
        self.stats["blocks"] += good
        if lo + good < hi:
            self._fail(job, lo + good, len(job.blocks))
            job.done = len(job.blocks)
        else:
            job.done = hi
        job.copy_seconds += time.perf_counter() - start
