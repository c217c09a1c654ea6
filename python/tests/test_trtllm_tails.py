"""kvtier.trtllm: partial blocks (tails), driven by the stand-in executor of
test_trtllm_connector.py.

TensorRT-LLM takes a connector hit that ends inside a block: kvCacheManager.cpp's
WindowBlockManager::addSequence adds it to the prepopulated prompt length unchecked, and
LlmRequest::setPrepopulatedPromptLen starts the context there, so the forward computes the rest
of the block over the loaded page (docs/trtllm.md, "Partial blocks"). The stand-in does the same:
it computes from the prepopulated position, whatever it is, and its sampler digests every
position's K/V, so a tail that is not loaded, or loaded wrong, changes the generated tokens.
"""

from __future__ import annotations

import pytest

import kvtier
from kvtier.trtllm import connector as C
from kvtier.trtllm.options import connector_options
from kvtier.vllm.layout import tail_keys
from test_trtllm_connector import (
    BACKENDS,
    BS,
    LAYERS,
    PROMPT,
    ROW,
    ClientSpy,
    Engine,
    Request,
    llm_args,
    reference,
    stored_prefix,
    url_of,
)

# PROMPT is 4 whole blocks and 2 tokens: with a granularity of 1 token, its tail is the 2 tokens
# of block 4, stored under block 3's key.
NEXT_TURN_EXTRA = [777, 778, 779]


def tails_args(daemon, granularity=1, **over):
    return llm_args(url_of(daemon, f"partial_block_tokens={granularity}"), **over)


def chain(prompt):
    return kvtier.chain_keys(prompt, BS, "xxh3_128", root_seed="kvtier-trtllm")


def slots(engine, block, count):
    """The K/V of the first ``count`` token slots of ``block``, every layer, rank 0."""
    return [engine._read(0, block, layer, slot).tobytes() for layer in range(LAYERS) for slot in range(count)]


def first_turn(daemon, granularity=1, prompt=PROMPT):
    """Engine A computes ``prompt`` (one token generated) and saves it, its tail included."""
    a = Engine(tails_args(daemon, granularity), 32)
    out = a.run(Request(1, prompt, 1))[0]
    tail_slots = slots(a, len(prompt) // BS, len(prompt) % BS)  # A's free list hands out 0, 1, 2, ...
    a.close()
    return out, tail_slots


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_next_turn_loads_the_block_the_last_prompt_ended_in(daemon, backend):
    out_a, tail_slots_a = first_turn(daemon)
    keys = chain(PROMPT)
    tail = tail_keys(keys[3], PROMPT[16:18], [2])[0]
    prompt = PROMPT + out_a + NEXT_TURN_EXTRA  # 5 whole blocks and 2 tokens; block 4 continues the tail
    b = Engine(tails_args(daemon), 48, backend, reverse_free=True)
    scheduler_spy, worker_spy = ClientSpy(b.scheduler._clients[0]), ClientSpy(b.workers[0]._client)
    b.scheduler._clients[0], b.workers[0]._client = scheduler_spy, worker_spy
    out = b.run(Request(2, prompt, 2))[0]
    assert b.matched[2] == 4 * BS + 2  # whole blocks 0-3, then the tail's 2 tokens of block 4
    assert b.scheduler.stats["tail_hits"] == 1 and b.scheduler.stats["tail_hit_tokens"] == 2
    assert scheduler_spy.pinned == [keys[:4] + [tail]]  # one run: the tail is block 3's child
    assert worker_spy.got == [keys[:4] + [tail]]
    assert slots(b, 47 - 4, 2) == tail_slots_a  # B's block 4 got A's 2 tokens
    assert out == reference(daemon, prompt, 2, backend)
    b.close()


def test_a_tail_dropped_from_the_load_is_detected(daemon):
    """Negative control: the same run with the tail taken out of the worker's loads generates
    other tokens (the engine attends to the tail's positions, it does not recompute them)."""
    out_a, _ = first_turn(daemon)
    prompt = PROMPT + out_a + NEXT_TURN_EXTRA
    b = Engine(tails_args(daemon), 32)

    def drop_tail():
        meta = b.workers[0].get_connector_meta()
        meta.loads = [(req_id, blocks[:-1]) for req_id, blocks in meta.loads]

    b.load_hook = drop_tail
    out = b.run(Request(2, prompt, 2))[0]
    assert b.matched[2] == 4 * BS + 2
    assert b.workers[0].stats["loaded_blocks"] == 4
    assert out != reference(daemon, prompt, 2)
    b.close()


def test_a_prompt_that_leaves_the_tail_inside_it_gets_the_whole_blocks_only(daemon):
    """The tail's key names its tokens: a prompt whose token 17 differs finds no tail of 2, and
    a tail of 1 (token 16 alone) was never stored."""
    first_turn(daemon)
    prompt = PROMPT[:17] + [999] + NEXT_TURN_EXTRA
    b = Engine(tails_args(daemon), 32)
    assert b.run(Request(2, prompt, 1))[0] == reference(daemon, prompt, 1)
    assert b.matched[2] == 4 * BS and b.scheduler.stats["tail_hits"] == 0
    b.close()


def test_the_same_prompt_again_loads_the_tail_for_all_but_its_last_token_and_saves_nothing(daemon):
    out_a, _ = first_turn(daemon)
    b = Engine(tails_args(daemon), 32)
    assert b.run(Request(2, PROMPT, 1))[0] == out_a
    assert b.matched[2] == len(PROMPT) - 1  # the tail of 2 loaded whole, its last token recomputed
    assert b.workers[0].stats["saved_blocks"] == 0  # the blocks and this very tail are stored
    b.close()


@pytest.mark.parametrize("granularity, prompt_len, matched", [
    (2, 19, 18),  # 3 tokens in the last block, stored as a tail of 2
    (1, 19, 19),
    (0, 18, 16),  # tails off
    (BS, 18, 16),  # no tail length below a whole block
])
def test_the_granularity_rounds_the_tail_down(daemon, granularity, prompt_len, matched):
    prompt = [401 + 7 * i for i in range(prompt_len)]
    out_a, _ = first_turn(daemon, granularity, prompt)
    assert stored_prefix(daemon, tails_args(daemon), prompt) == 4
    next_prompt = prompt + out_a + NEXT_TURN_EXTRA
    b = Engine(tails_args(daemon, granularity), 32)
    assert b.run(Request(2, next_prompt, 1))[0] == reference(daemon, next_prompt, 1)
    assert b.matched[2] == matched
    b.close()


def test_a_device_hit_of_every_whole_block_reads_only_the_tail(daemon):
    out_a, tail_slots_a = first_turn(daemon)
    tail = tail_keys(chain(PROMPT)[3], PROMPT[16:18], [2])[0]
    prompt = PROMPT + out_a + NEXT_TURN_EXTRA
    b = Engine(tails_args(daemon), 32, reverse_free=True)
    b.reuse[2] = 4 * BS  # the engine's own cache has blocks 0-3
    scheduler_spy, worker_spy = ClientSpy(b.scheduler._clients[0]), ClientSpy(b.workers[0]._client)
    b.scheduler._clients[0], b.workers[0]._client = scheduler_spy, worker_spy
    ids = []
    b.load_hook = lambda: ids.extend(b.blocks[2])
    assert b.run(Request(2, prompt, 1))[0] == reference(daemon, prompt, 1)
    assert b.matched[2] == 2
    assert scheduler_spy.pinned == [[tail]] and worker_spy.got == [[tail]]
    assert slots(b, ids[4], 2) == tail_slots_a
    b.close()


def test_a_chunked_prefill_after_a_tail_ends_its_first_chunk_at_a_block_boundary(daemon):
    """A hit of 18 tokens and chunks of 4: the first chunk computes positions 18-19 (the rest
    of the tail's block), then whole blocks; every whole block and the new tail are saved."""
    out_a, _ = first_turn(daemon)
    prompt = PROMPT + out_a + [800 + i for i in range(11)]  # 30 tokens: 7 whole blocks and 2
    b = Engine(tails_args(daemon), 32)
    assert b.run(Request(2, prompt, 1, chunk=4))[0] == reference(daemon, prompt, 1)
    assert b.matched[2] == 18
    assert stored_prefix(daemon, tails_args(daemon), prompt) == 7
    c = Engine(tails_args(daemon), 32)
    again = prompt + [900]  # continues the new tail: 7 blocks and 2 tokens of block 7
    assert c.run(Request(3, again, 1))[0] == reference(daemon, again, 1)
    assert c.matched[3] == 7 * BS + 2
    c.close()
    b.close()


def test_a_tail_only_one_rank_has_is_no_tail(daemon):
    args = tails_args(daemon, tensor_parallel_size=2)
    a = Engine(tails_args(daemon, 0, tensor_parallel_size=2), 32, tp=2)  # whole blocks only
    a.run(Request(1, PROMPT, 1))
    a.close()
    keys = chain(PROMPT)
    tail = tail_keys(keys[3], PROMPT[16:18], [2])[0]
    page = bytes(LAYERS * 2 * BS * ROW * 2)
    prompt = PROMPT + [5, 6, 7]
    opts = connector_options(args)
    for rank, expected in ((1, 16), (0, 18)):  # the tail in rank 1's namespace, then in both
        with kvtier.Client.connect_unix(daemon.socket_path, tenant=opts.tenants[rank]) as c:
            c.put([tail], [page], parent=keys[3], tokens=2)
        scheduler = C.KvtierConnectorScheduler(args)
        assert scheduler.get_num_new_matched_tokens(Request(2, prompt, 1), 0) == (expected, False)
        scheduler.close()


class ShortPins(ClientSpy):
    """Pins hold only the first ``holds`` blocks of the run, as when the rest left the store
    between the lookup and the pin."""

    def __init__(self, client, holds):
        super().__init__(client)
        self._holds = holds

    def pin(self, keys):
        pin_id, pinned = super().pin(keys[:self._holds])
        return pin_id, pinned


@pytest.mark.parametrize("holds, matched", [
    (4, 4 * BS),  # the tail left the store: the whole blocks still load
    (2, 2 * BS),  # so did blocks 2 and 3: the tail goes with them
])
def test_a_pin_that_holds_less_shortens_the_hit(daemon, holds, matched):
    out_a, _ = first_turn(daemon)
    prompt = PROMPT + out_a + NEXT_TURN_EXTRA
    b = Engine(tails_args(daemon), 32)
    b.scheduler._clients[0] = ShortPins(b.scheduler._clients[0], holds)
    worker_spy = ClientSpy(b.workers[0]._client)
    b.workers[0]._client = worker_spy
    assert b.run(Request(2, prompt, 1))[0] == reference(daemon, prompt, 1)
    assert b.matched[2] == matched and b.scheduler.stats["tail_hits"] == 0
    assert worker_spy.got == [chain(PROMPT)[:holds]]
    b.close()
