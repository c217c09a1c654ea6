"""The worker side's saves, run on one background thread (docs/vllm.md "Saves").

wait_for_save, after the forward, hands each request's completed blocks to submit. Their pages
are copied (the pack callback) into free slots of a staging ring (the saver's own shared-memory
segment), one put per chunk; the put (a round trip and the server's copy into its tiers) runs
on the saver thread while the next forward computes. Where the copy runs:
- deferred (submit(..., deferred=True)): on the saver's packer thread, after the step returned.
  The scheduler holds a reference on each of the save's blocks in vLLM's block pool until every
  worker reported the job finished (kvtier.vllm.pins), so vLLM cannot give them to another
  request meanwhile; the step pays nothing for the save.
- on the caller's thread, before submit returns: where nothing holds the blocks (no block pool
  bound), since vLLM may reuse or overwrite a block once the step returns (a finished request's
  blocks are freed, a preempted one's given to another request).

- Order: one thread puts the chunks first in, first out, so a chain's puts land in order and
  a child's put always follows its parent's. A chunk whose earlier chunk of the same job
  raised or was refused is skipped (it would have no parent), as the synchronous code did.
- Back-pressure: a chunk waits for free staging slots (the ring is freed in put order), in
  submit or on the packer thread; nothing is dropped. stats["waits"] and stats["wait_s"] count
  those waits. A job copied on the caller's thread waits for the deferred ones before it, so
  puts stay in submission order.
- Failures: a put that raises is logged and its blocks counted in refused_blocks and
  failed_puts; the thread goes on with the next job.
- Failures: a pack that raises fails the job's chunks not yet queued (counted as refused); on
  the caller's thread it is re-raised, on the packer thread logged.
- Shutdown: close flushes: it waits (up to a timeout) until every job is packed and every
  queued put has been sent, then stops the threads; what is still queued after the timeout is
  abandoned, logged and counted in abandoned_blocks.

No torch, vLLM or kvtier import: the copies and puts are callbacks, so ordering, back-pressure,
failures and shutdown are tested with plain Python (python/tests/test_vllm_saver.py).

Thread-safety: one producer: submit, take_finished, pending, stats_snapshot, flush and close are
called by vLLM's worker thread; put runs only on the saver thread, pack on the packer thread
(deferred jobs) or the caller of submit (the others), never both at once. State shared by the
three is guarded by self._cv; a staging slot is written by pack only while it is reserved and
not yet queued, and read by put only while queued, so the bytes need no lock.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from kvtier.vllm.layout import batch_ranges

logger = logging.getLogger(__name__)

# put(parent key or None, keys, first_slot, tokens) -> (new_blocks, refused_blocks) for the
# blocks in staging slots first_slot, first_slot + 1, ..., each holding `tokens` tokens (0: a
# whole block); raises if the put failed.
Put = Callable[[Optional[bytes], Sequence[bytes], int, int], tuple]
# pack(blocks, first_slot): copies the pages of blocks [(block_id, key)] into the staging slots
# from first_slot.
Pack = Callable[[Sequence[tuple], int], None]


@dataclass
class SaveJob:
    req_id: str
    parent: Optional[bytes]  # the key before blocks[0] in its chain
    blocks: list  # [(block_id, key)] in chain order
    tokens: int = 0  # the tokens each block holds: 0 for whole blocks, fewer for a tail
    chunks_left: int = 0
    saved: int = 0  # blocks the server stored anew
    refused: int = 0  # blocks refused, or in a put that raised
    skipped: int = 0  # blocks after a refusal or failure, not sent
    failed_puts: int = 0
    broken: bool = False  # a chunk was refused or failed: the rest of the job is skipped
    pin: Optional[int] = None  # the scheduler's hold on the blocks (kvtier.vllm.pins), if any
    submitted: float = 0.0  # perf_counter at submit
    seconds: float = 0.0  # submit to the last chunk's put
    step_seconds: float = 0.0  # of it, until the last chunk was copied (on the step unless deferred)


@dataclass
class _Chunk:
    job: SaveJob
    lo: int
    hi: int
    first_slot: int


class BlockSaver:
    def __init__(self, put: Put, slots: int, max_chunk_slots: Optional[int] = None,
                 close_timeout_s: float = 60.0):
        """slots: staging slots of one block each. max_chunk_slots (default: half the ring,
        at least 1) bounds one put, so a step packs its next chunk while the previous one is
        being put."""
        if slots < 1:
            raise ValueError("the save staging holds no block; raise shared_memory_bytes")
        self._put = put
        self._slots = slots
        self._chunk_slots = max(1, min(slots, max_chunk_slots or slots // 2))
        self._close_timeout = close_timeout_s
        self._cv = threading.Condition()
        self._queue: collections.deque = collections.deque()  # chunks queued or being put, in order
        self._queued = 0  # of them, not yet taken by the thread
        self._open: collections.Counter = collections.Counter()  # req_id -> unfinished jobs
        self._to_pack: collections.deque = collections.deque()  # deferred (job, pack, ranges), in order
        self._packing = False  # the packer thread is copying a job's chunks
        self._finished: list = []  # jobs done, not yet reported
        self._closed = False
        self.stats = {"jobs": 0, "chunks": 0, "saved_blocks": 0, "refused_blocks": 0, "skipped_blocks": 0,
                      "failed_puts": 0, "waits": 0, "wait_s": 0.0, "abandoned_blocks": 0}
        self._thread = threading.Thread(target=self._run, name="kvtier-saver", daemon=True)
        self._thread.start()
        self._packer = threading.Thread(target=self._run_packer, name="kvtier-save-packer", daemon=True)
        self._packer.start()

    # ----------------------------------------------------------- vLLM's worker thread
    def submit(self, job: SaveJob, pack: Pack, deferred: bool = False) -> None:
        """Packs job's blocks into staging, chunk by chunk, and queues their puts: on the packer
        thread when deferred (submit returns at once), else here, waiting while the staging is
        full and after the deferred jobs before it. A pack that raises fails the chunks not yet
        queued (they are counted as refused and the job is skipped from there); here it is
        re-raised."""
        job.submitted = time.perf_counter()
        ranges = batch_ranges(len(job.blocks), 1, self._chunk_slots)
        with self._cv:
            if self._closed:
                raise RuntimeError("the saver is closed")
            self._open[job.req_id] += 1
            job.chunks_left = len(ranges)
            if not ranges:
                self._finish_if_done_locked(job)
                return
            if deferred:
                self._to_pack.append((job, pack, ranges))
                self._cv.notify_all()
                return
            self._cv.wait_for(lambda: not self._to_pack and not self._packing)
        self._pack_chunks(job, pack, ranges)

    def _pack_chunks(self, job: SaveJob, pack: Pack, ranges: list) -> None:
        for i, (lo, hi) in enumerate(ranges):
            try:
                first = self._reserve(hi - lo)
                pack(job.blocks[lo:hi], first)
            except BaseException:
                with self._cv:  # the chunks queued before it are put; the rest never exist
                    job.refused += len(job.blocks) - lo
                    self.stats["refused_blocks"] += len(job.blocks) - lo
                    job.chunks_left -= len(ranges) - i
                    self._finish_if_done_locked(job)
                    self._cv.notify_all()
                raise
            with self._cv:
                self._queue.append(_Chunk(job, lo, hi, first))
                self._queued += 1
                job.step_seconds = time.perf_counter() - job.submitted
                self._cv.notify_all()

    def pending(self, req_id: str) -> bool:
        """Whether a save of req_id is queued or being put."""
        with self._cv:
            return self._open[req_id] > 0

    def take_finished(self) -> list:
        """The jobs whose every chunk was put (or skipped) since the last call."""
        with self._cv:
            done, self._finished = self._finished, []
        return done

    def stats_snapshot(self) -> dict:
        with self._cv:
            return dict(self.stats)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every job is packed and every queued put sent; False if timeout passed first."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._queue and not self._to_pack and not self._packing, timeout)

    def close(self) -> None:
        """Flushes (up to close_timeout_s), abandons what is still queued, stops the thread."""
        if not self.flush(self._close_timeout):
            logger.warning("kvtier saver: puts still queued after %.0f s at shutdown; abandoning them",
                           self._close_timeout)
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._packer.join(self._close_timeout)
        self._thread.join(self._close_timeout)

    # ----------------------------------------------------------------- internals
    def _reserve(self, n: int) -> int:
        """The first of n free contiguous staging slots; waits for the thread to free them."""
        with self._cv:
            if self._closed:
                raise RuntimeError("the saver is closed")
            first = self._place_locked(n)
            if first is not None:
                return first
            self.stats["waits"] += 1
            t0 = time.perf_counter()
            while first is None:
                if self._closed:
                    raise RuntimeError("the saver is closed")
                self._cv.wait()
                first = self._place_locked(n)
            self.stats["wait_s"] += time.perf_counter() - t0
            return first

    def _place_locked(self, n: int) -> Optional[int]:
        """A ring: chunks are freed in the order they were placed, so the free space is after
        the newest chunk and before the oldest. A chunk never wraps around the end."""
        if not self._queue:
            return 0 if n <= self._slots else None
        oldest, newest = self._queue[0], self._queue[-1]
        head = newest.first_slot + (newest.hi - newest.lo)
        if head > oldest.first_slot:  # used: [oldest, head); free: [head, end) and [0, oldest)
            if n <= self._slots - head:
                return head
            return 0 if n <= oldest.first_slot else None
        return head if n <= oldest.first_slot - head else None  # wrapped: free is [head, oldest)

    def _finish_if_done_locked(self, job: SaveJob) -> None:
        if job.chunks_left == 0:
            job.seconds = time.perf_counter() - job.submitted
            self._finished.append(job)
            self._open[job.req_id] -= 1
            if self._open[job.req_id] <= 0:
                del self._open[job.req_id]
            self.stats["jobs"] += 1

    def _run_packer(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._to_pack or self._closed)
                if self._closed:  # flushed, or close timed out: abandon what is left
                    abandoned = sum(len(job.blocks) for job, _, _ in self._to_pack)
                    if abandoned:
                        self.stats["abandoned_blocks"] += abandoned
                        logger.warning("kvtier saver: %d blocks never copied at shutdown", abandoned)
                    self._to_pack.clear()
                    self._cv.notify_all()
                    return
                job, pack, ranges = self._to_pack.popleft()
                self._packing = True
            try:
                self._pack_chunks(job, pack, ranges)
            except Exception as e:  # noqa: BLE001: a failed copy must not stop later saves
                logger.warning("kvtier saver: copying %d blocks for %s failed: %s", len(job.blocks), job.req_id, e)
            finally:
                with self._cv:
                    self._packing = False
                    self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._queued == 0 and not self._closed:
                    self._cv.wait()
                if self._queued == 0:  # closed and drained (or abandoned below)
                    return
                if self._closed:  # close timed out: abandon the rest
                    abandoned = sum(c.hi - c.lo for c in self._queue)
                    self.stats["abandoned_blocks"] += abandoned
                    logger.warning("kvtier saver: %d queued blocks abandoned at shutdown", abandoned)
                    self._queue.clear()
                    self._queued = 0
                    self._cv.notify_all()
                    return
                chunk = self._queue[len(self._queue) - self._queued]
                self._queued -= 1
                job = chunk.job
                skip = job.broken
            n = chunk.hi - chunk.lo
            new = refused = 0
            failed = False
            if not skip:
                keys = [k for _, k in job.blocks[chunk.lo:chunk.hi]]
                parent = job.parent if chunk.lo == 0 else job.blocks[chunk.lo - 1][1]
                try:
                    new, refused = self._put(parent, keys, chunk.first_slot, job.tokens)
                except Exception as e:  # noqa: BLE001: a failed put must not stop later saves
                    logger.warning("kvtier saver: put of %d blocks for %s failed: %s", n, job.req_id, e)
                    failed, refused = True, n
            with self._cv:
                if skip:
                    job.skipped += n
                    self.stats["skipped_blocks"] += n
                else:
                    job.saved += new
                    job.refused += refused
                    job.failed_puts += failed
                    job.broken = job.broken or failed or refused > 0
                    self.stats["chunks"] += 1
                    self.stats["saved_blocks"] += new
                    self.stats["refused_blocks"] += refused
                    self.stats["failed_puts"] += failed
                assert self._queue[0] is chunk, "puts complete in order"
                self._queue.popleft()
                job.chunks_left -= 1
                self._finish_if_done_locked(job)
                self._cv.notify_all()
