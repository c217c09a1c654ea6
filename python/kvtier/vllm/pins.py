"""The engine blocks the vLLM connector's saves read, held until every worker copied them: no
vLLM, torch or numpy import, so python/tests/test_vllm_pins.py checks it under plain python3.

A save's pages are copied out of vLLM's KV cache by the worker's saver thread after the step
that completed them returned (docs/vllm.md, "Saves"), so the copy is off the step. Until then
the blocks must not change hands: once a step returns, vLLM may free a finished request's
blocks, or a preempted one's, and give them to another request. So the scheduler takes one
reference on each block a save reads, in vLLM's block pool (``BlockPool.touch``, as a prefix
cache hit does: a block with references is never reallocated, and one in the free queue
leaves it), when it puts the save in a step's metadata, and gives the references back
(``BlockPool.free_blocks``, last block first, so the chain's tail is evicted first, as vLLM
frees) once every worker reported the save's pages copied, through the connector's worker
metadata. A save that failed is reported too: its references are never kept past it.

Not thread-safe: the connector's scheduler role uses it from vLLM's engine-core thread only.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence


class SavePins:
    def __init__(self, reporters: int = 1):
        """``reporters``: how many workers report each save (the tensor-parallel ranks)."""
        if reporters < 1:
            raise ValueError(f"SavePins: reporters must be at least 1, got {reporters}")
        self._reporters = reporters
        self._pool: Any = None
        self._next = 0
        self._held: dict[int, list] = {}  # save id -> [block ids, reports]

    def bind(self, pool: Any) -> None:
        """vLLM's block pool (``KVConnectorBase_V1.bind_gpu_block_pool``). Without one, nothing
        is pinned and the worker copies each save's pages on the step, as before."""
        self._pool = pool

    def pin(self, block_ids: Sequence[int]) -> Optional[int]:
        """References the blocks of one save: its id, for the workers to report; None when no
        pool is bound (the save must then be copied on its step)."""
        if self._pool is None:
            return None
        ids = list(dict.fromkeys(block_ids))  # one reference per block
        self._pool.touch([self._pool.blocks[b] for b in ids])
        self._next += 1
        self._held[self._next] = [ids, 0]
        return self._next

    def copied(self, reports: Mapping[int, int]) -> None:
        """Workers copied these saves' pages: save id -> how many workers did, in one step.
        A save's references go back once all of them did; unknown ids are ignored."""
        for pin, count in reports.items():
            entry = self._held.get(pin)
            if entry is None:
                continue
            entry[1] += count
            if entry[1] >= self._reporters:
                del self._held[pin]
                self._pool.free_blocks(self._pool.blocks[b] for b in reversed(entry[0]))

    def pending(self) -> bool:
        """Whether some save still holds blocks: the engine must keep stepping for the workers'
        reports to arrive, and may wait for them rather than preempt a request."""
        return bool(self._held)

    def held_blocks(self) -> int:
        return sum(len(ids) for ids, _ in self._held.values())
