"""kvtier.vllm.pins.SavePins against a stand-in for vLLM's BlockPool (touch and free_blocks with
reference counts; no vLLM import): a save's blocks are referenced once each while it is
pinned, given back last block first once every worker reported it copied, and nothing is
pinned without a pool."""

import pytest

from kvtier.vllm.pins import SavePins


class Block:
    def __init__(self, block_id):
        self.block_id = block_id
        self.ref_cnt = 0


class FakePool:
    """vLLM's BlockPool as far as the pins use it: blocks by id, touch, free_blocks."""

    def __init__(self, n):
        self.blocks = [Block(i) for i in range(n)]
        self.freed = []  # block ids in the order free_blocks got them

    def touch(self, blocks):
        for b in blocks:
            b.ref_cnt += 1

    def free_blocks(self, ordered_blocks):
        for b in ordered_blocks:
            assert b.ref_cnt > 0, f"block {b.block_id} freed more often than touched"
            b.ref_cnt -= 1
            self.freed.append(b.block_id)


def test_without_a_pool_nothing_is_pinned():
    pins = SavePins()
    assert pins.pin([1, 2]) is None
    assert not pins.pending()


def test_a_save_holds_its_blocks_until_every_worker_copied_them():
    pool = FakePool(8)
    pins = SavePins(reporters=2)
    pins.bind(pool)
    first = pins.pin([3, 4, 5])
    second = pins.pin([5, 6])
    assert first != second
    assert [b.ref_cnt for b in pool.blocks] == [0, 0, 0, 1, 1, 2, 1, 0]
    assert pins.pending() and pins.held_blocks() == 5
    pins.copied({first: 1})
    assert pool.freed == [], "one of two workers reported"
    pins.copied({first: 1, 999: 2})  # an unknown save is ignored
    assert pool.freed == [5, 4, 3], "given back last block first"
    pins.copied({second: 2})
    assert [b.ref_cnt for b in pool.blocks] == [0] * 8
    assert not pins.pending()
    pins.copied({second: 2})  # a late report is ignored
    assert pool.freed == [5, 4, 3, 6, 5]


def test_a_block_listed_twice_is_referenced_once():
    pool = FakePool(4)
    pins = SavePins()
    pins.bind(pool)
    pin = pins.pin([1, 1, 2])
    assert [b.ref_cnt for b in pool.blocks] == [0, 1, 1, 0]
    pins.copied({pin: 1})
    assert [b.ref_cnt for b in pool.blocks] == [0, 0, 0, 0]


def test_no_reporters_is_refused():
    with pytest.raises(ValueError):
        SavePins(reporters=0)
