"""kvtier.vllm's pure helpers (no vLLM, no torch): the hit a lookup gives vLLM, the blocks a
step loads and saves, page geometry from shapes and strides, batching, namespaces. The parts
that need torch or vLLM skip cleanly where they are absent."""

import hashlib
import importlib.util
import struct

import pytest

from kvtier.vllm.layout import (
    NULL_BLOCK_ID,
    RequestPlan,
    batch_ranges,
    block_key,
    block_rows,
    combine_shard_lookups,
    contiguous_runs,
    layout_fingerprint,
    longest_tail,
    matched_tokens,
    namespace_tenant,
    natural_layer_order,
    page_geometry,
    row_block_ids,
    saveable,
    shard_tenants,
    tail_keys,
    tail_lengths,
)

BS = 128


def digests(n, salt=0):
    return [bytes([(i + salt) % 256]) * 32 for i in range(n)]


def test_block_key_is_first_16_bytes():
    d = bytes(range(32))
    assert block_key(d) == bytes(range(16))
    with pytest.raises(ValueError):
        block_key(b"short")


def test_block_key_matches_kvtier_keys():
    kvtier = pytest.importorskip("kvtier")
    ids = list(range(3 * BS))
    ds = kvtier.chain_digests(ids, BS, "sha256_cbor")
    assert [block_key(d) for d in ds] == kvtier.chain_keys(ids, BS, "sha256_cbor")


@pytest.mark.parametrize(
    "num_hashes,num_tokens,local,stored,expect",
    [
        (7, 1000, 0, 7, (7, 7 * 128)),  # 1000 tokens: 7 full blocks; the last token is in block 7
        # exactly 8 blocks: the last one loads too, and vLLM recomputes only the final token
        (8, 1024, 0, 8, (8, 1023)),
        (8, 1024, 0, 7, (7, 7 * 128)),
        (8, 1025, 0, 8, (8, 1024)),
        (7, 1000, 3, 7, (4, 4 * 128)),  # vLLM's own hit comes first
        (8, 1024, 7, 8, (1, 127)),
        (7, 1000, 5, 2, (0, 0)),  # kvtier has less than vLLM
        (7, 1000, 0, 0, (0, 0)),
        (0, 100, 0, 0, (0, 0)),
        (1, 1, 0, 1, (0, 0)),
        (1, 128, 0, 1, (1, 127)),
    ],
)
def test_matched_tokens(num_hashes, num_tokens, local, stored, expect):
    assert matched_tokens(num_hashes, num_tokens, BS, local, stored) == expect


def test_plan_loads_then_saves_the_rest_in_chain_order():
    h = digests(10)
    p = RequestPlan("r", BS)
    ext, ext_tokens = matched_tokens(len(h[:7]), 1000, BS, local_blocks=1, stored_prefix=4)
    assert (ext, ext_tokens) == (3, 3 * BS)
    p.on_lookup(1, 4, ext)
    p.on_alloc(list(range(100, 108)), ext * BS)
    assert p.take_load(h[:7]) == [(101, h[1][:16]), (102, h[2][:16]), (103, h[3][:16])]
    assert p.take_load(h[:7]) == []  # once
    # this step computes tokens 512..1000: blocks 4, 5, 6 complete
    parent, saves = p.take_save(h[:7], 1000)
    assert parent == h[3][:16] and saves == [(104, h[4][:16]), (105, h[5][:16]), (106, h[6][:16])]
    assert p.take_save(h[:7], 1001) == (None, [])
    # decoding fills block 7 (new block id appended by the scheduler)
    p.append_blocks([108])
    parent, saves = p.take_save(h[:8], 1024)
    assert parent == h[6][:16] and saves == [(107, h[7][:16])]


def test_plan_scheduler_keeps_fewer_external_tokens():
    h = digests(4)
    p = RequestPlan("r", BS)
    p.on_lookup(0, 4, 3)
    p.on_alloc([1, 2, 3, 4], 0)  # the scheduler took none
    assert p.take_load(h) == []
    p.on_lookup(0, 4, 3)
    p.on_alloc([1, 2, 3, 4], BS + 5)  # part of the second block: it loads whole
    assert [b for b, _ in p.take_load(h)] == [1, 2]


def test_plan_loads_the_last_block_of_a_block_aligned_prompt():
    h = digests(4)
    p = RequestPlan("r", BS)
    ext, tokens = matched_tokens(4, 4 * BS, BS, 0, 4)
    p.on_lookup(0, 4, ext)
    p.on_alloc([10, 11, 12, 13], tokens)
    assert [b for b, _ in p.take_load(h)] == [10, 11, 12, 13]
    assert p.take_save(h, 4 * BS) == (None, [])  # all four are in kvtier already


def test_plan_chunked_prefill_saves_each_chunk():
    h = digests(8)
    p = RequestPlan("r", BS)
    p.on_lookup(0, 0, 0)
    p.on_alloc(list(range(8)), 0)
    parent, s1 = p.take_save(h, 300)  # first chunk: 300 tokens -> blocks 0, 1
    assert parent is None and [b for b, _ in s1] == [0, 1]
    parent, s2 = p.take_save(h, 1000)
    assert parent == h[1][:16] and [b for b, _ in s2] == [2, 3, 4, 5, 6]


def test_page_geometry_gqa_cpu():
    # [num_blocks, kv_heads, block_size, 2*head] bf16 (tools/vllm/README.md)
    g = page_geometry((8192, 2, 128, 128), (32768, 16384, 128, 1), 2)
    assert (g.num_blocks, g.page_bytes, g.block_stride_bytes) == (8192, 65536, 65536)


def test_page_geometry_mla_cpu_ignores_unit_dims():
    g = page_geometry((29127, 1, 16, 576), (9216, 576, 576, 1), 2)
    assert (g.page_bytes, g.block_stride_bytes) == (18432, 18432)
    g3 = page_geometry((29127, 16, 576), (9216, 576, 1), 2)
    assert g3.page_bytes == 18432


def test_page_geometry_spaced_pages_and_refusals():
    assert page_geometry((4, 8, 16), (256, 16, 1), 4).block_stride_bytes == 1024
    with pytest.raises(ValueError, match="not contiguous"):
        page_geometry((4, 8, 16), (128, 1, 8), 2)  # transposed inside the page
    with pytest.raises(ValueError, match="overlap"):
        page_geometry((4, 8, 16), (64, 16, 1), 2)
    with pytest.raises(ValueError):
        page_geometry((4,), (1,), 2)


def test_batch_ranges():
    assert batch_ranges(10, 3, 10) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert batch_ranges(0, 3, 10) == []
    with pytest.raises(ValueError, match="shared_memory_bytes"):
        batch_ranges(1, 11, 10)


def test_layer_order_and_namespace():
    names = [f"model.layers.{i}.self_attn.attn" for i in (10, 2, 1, 0)]
    assert natural_layer_order(names) == [f"model.layers.{i}.self_attn.attn" for i in (0, 1, 2, 10)]
    a = layout_fingerprint({"block_size": 128, "dtype": "bf16", "layers": names})
    assert a == layout_fingerprint({"layers": names, "dtype": "bf16", "block_size": 128})
    assert a != layout_fingerprint({"block_size": 16, "dtype": "bf16", "layers": names})
    assert len(a) == 16
    assert namespace_tenant("chat", "llama", a) == f"chat/llama/{a}"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_page_views_round_trip_with_torch():
    import torch

    kv = torch.arange(6 * 2 * 4 * 8, dtype=torch.float32).to(torch.bfloat16).view(6, 2, 4, 8)
    g = page_geometry(tuple(kv.shape), tuple(kv.stride()), kv.element_size())
    u8 = kv.view(torch.uint8).as_strided((g.num_blocks, g.page_bytes), (g.block_stride_bytes, 1))
    assert bytes(u8[3].numpy()) == bytes(kv[3].contiguous().view(torch.uint8).numpy())
    ids = torch.tensor([1, 4])
    pages = u8.index_select(0, ids).clone()
    other = torch.zeros_like(kv)
    o8 = other.view(torch.uint8).as_strided((g.num_blocks, g.page_bytes), (g.block_stride_bytes, 1))
    o8.index_copy_(0, ids, pages)
    assert torch.equal(other[1], kv[1]) and torch.equal(other[4], kv[4]) and not other[0].any()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")
def test_connector_module_imports():
    from kvtier.vllm import KvtierConnector  # noqa: F401


def test_shard_tenants_per_rank_unless_replicated():
    assert shard_tenants("t/m/f", 1, False) == ["t/m/f"]
    assert shard_tenants("t/m/f", 2, False) == ["t/m/f/tp0of2", "t/m/f/tp1of2"]
    assert shard_tenants("t/m/f", 4, True) == ["t/m/f"], "MLA: one copy for every rank"
    with pytest.raises(ValueError):
        shard_tenants("t", 0, False)


def test_combine_shard_lookups_takes_what_every_rank_has():
    rank0 = (4, 4, [0, 0, 1, 1], [8] * 4)
    rank1 = (3, 2, [0, 1, 1], [8] * 3)
    assert combine_shard_lookups([rank0, rank1]) == (3, 2, [0, 1, 1])
    assert combine_shard_lookups([rank0]) == (4, 4, [0, 0, 1, 1])
    assert combine_shard_lookups([rank0, (0, 0, [], [])]) == (0, 0, [])
    assert combine_shard_lookups([]) == (0, 0, [])


def test_contiguous_runs():
    assert contiguous_runs([]) == []
    assert contiguous_runs([7]) == [(0, 7, 1)]
    assert contiguous_runs([3, 4, 5, 9, 10, 2]) == [(0, 3, 3), (3, 9, 2), (5, 2, 1)]
    assert contiguous_runs([5, 4]) == [(0, 5, 1), (1, 4, 1)], "only ascending ids share a slice"


def test_contiguous_runs_leave_out_the_null_block():
    # A sliding-window group's column: the window passed positions 0 and 1.
    assert contiguous_runs([0, 0, 7, 8], skip=NULL_BLOCK_ID) == [(2, 7, 2)]
    # Positions around a null block are not one slice of the load buffer, even with ids in a row.
    assert contiguous_runs([5, 0, 6], skip=NULL_BLOCK_ID) == [(0, 5, 1), (2, 6, 1)]
    assert contiguous_runs([0, 1, 2]) == [(0, 0, 3)], "without skip, id 0 is a block like any other"


def test_block_rows_name_each_position_in_every_group():
    full, window = [4, 5, 6], [0, 9, 10]
    assert block_rows([full, window]) == [(4, 0), (5, 9), (6, 10)]
    assert block_rows([full]) == [(4,), (5,), (6,)]
    assert block_rows([[], []]) == []
    with pytest.raises(ValueError, match="different lengths"):
        block_rows([full, [9, 10]])  # rows would pair one position's block with another's


def test_saves_start_after_the_last_row_a_sliding_window_passed():
    k = [bytes([i]) * 16 for i in range(4)]
    whole = [((4, 8), k[1]), ((5, 9), k[2])]
    assert saveable(k[0], whole) == (k[0], whole)
    holed = [((3, 0), k[0]), ((4, 0), k[1]), ((5, 9), k[2]), ((6, 10), k[3])]
    assert saveable(None, holed) == (k[1], holed[2:]), "the rest is saved under the last passed block's key"
    assert saveable(None, holed[:2]) == (k[1], [])
    assert saveable(None, []) == (None, [])


def test_row_block_ids_are_every_groups_but_the_null_block():
    assert row_block_ids([(4, 0), (5, 9)]) == [4, 5, 9]
    assert row_block_ids([]) == []


def test_tail_lengths_are_multiples_of_the_granularity_below_a_block():
    assert tail_lengths(104, BS, 16) == [16, 32, 48, 64, 80, 96]
    assert tail_lengths(500, BS, 16) == [16, 32, 48, 64, 80, 96, 112]  # 128 is a whole block
    assert tail_lengths(15, BS, 16) == []
    assert tail_lengths(500, BS, 0) == []  # tails off
    assert tail_lengths(3, BS, 1) == [1, 2, 3]
    assert len(tail_lengths(500, BS, 1)) == BS - 1
    with pytest.raises(ValueError):
        tail_lengths(10, BS, -1)


def test_tail_keys_name_the_parent_and_exactly_the_tokens():
    parent, other = bytes(range(32)), bytes(range(1, 33))
    toks = list(range(1000, 1100))
    k16, k32 = tail_keys(parent, toks, [16, 32])
    # The format stored keys depend on: SHA-256 over the domain, the parent hash, uint32 LE ids.
    want = hashlib.sha256(b"kvtier-vllm-tail\0" + parent + struct.pack("<32I", *toks[:32])).digest()[:16]
    assert k32 == want and len(k16) == 16
    assert tail_keys(parent, toks[:32], [32]) == [k32]  # computed incrementally or at once
    assert k16 != k32
    assert tail_keys(other, toks, [32]) != [k32]
    assert tail_keys(parent, toks[:31] + [7], [32]) != [k32]
    with pytest.raises(ValueError):
        tail_keys(parent, toks[:10], [16])  # longer than the tokens given
    with pytest.raises(ValueError):
        tail_keys(parent, [1 << 32] * 16, [16])


def test_longest_tail_is_the_longest_every_rank_has_and_finds_worth_loading():
    have, miss, not_worth = (1, 1, [0], [64]), (0, 0, [], []), (1, 0, [1], [64])
    assert longest_tail([[have, have, miss]]) == 1
    assert longest_tail([[have, have, have], [have, miss, miss]]) == 0  # rank 1 has only the shortest
    assert longest_tail([[have, not_worth]]) == 0
    assert longest_tail([[have, not_worth]], use_worth=False) == 1
    assert longest_tail([[miss, miss]]) == -1
    assert longest_tail([]) == -1


def test_plan_loads_a_tail_after_its_whole_blocks_and_counts_its_tier():
    h = digests(8)
    p = RequestPlan("r", BS)
    tail = (b"T" * 16, 1, 96)  # key, fastest tier, tokens
    p.on_lookup(1, 3, 2, [0, 0, 0], tail=tail)
    assert p.ext_tiers() == [0, 0, 1]
    p.on_alloc([10, 11, 12, 13, 14], 2 * BS + 96)
    assert p.take_load(h) == [(11, h[1][:16]), (12, h[2][:16]), (13, b"T" * 16)]
    # The scheduler kept only the whole blocks: the tail is not loaded.
    p.on_lookup(1, 3, 2, [0, 0, 0], tail=tail)
    p.on_alloc([10, 11, 12, 13, 14], 2 * BS)
    assert p.take_load(h) == [(11, h[1][:16]), (12, h[2][:16])]
    # A tail alone, on top of vLLM's own hit.
    p.on_lookup(3, 3, 0, [0, 0, 0], tail=tail)
    p.on_alloc([10, 11, 12, 13, 14], 50)
    assert p.take_load(h) == [(13, b"T" * 16)]


def test_plan_saves_the_prompts_tail_once_after_its_last_chunk():
    h = digests(8)
    toks = list(range(5000, 5000 + 1000))
    p = RequestPlan("r", BS)
    p.on_lookup(0, 0, 0)
    p.on_alloc(list(range(20, 28)), 0)
    assert p.take_save(h[:7], 512)[1] and p.take_tail_save(h[:7], toks, 1000, 512, 16) is None  # a chunk
    p.take_save(h[:7], 1000)
    parent, saves, tokens = p.take_tail_save(h[:7], toks, 1000, 1000, 16)
    # 1000 = 7 blocks + 104 tokens: the tail holds 96 of them, in block 7, under block 6.
    assert parent == h[6][:16] and saves == [(27, tail_keys(h[6], toks[896:], [96])[0])] and tokens == 96
    assert p.take_tail_save(h[:7], toks, 1000, 1001, 16) is None  # once
    q = RequestPlan("q", BS)
    q.on_lookup(0, 0, 0)
    q.on_alloc(list(range(20, 28)), 0)
    assert q.take_tail_save(h[:7], toks, 1000, 1000, 16) is None  # its parent was never saved
    for prompt_len in (1024, 1000 - 104 + 15, 100):  # aligned; under the granularity; no whole block
        r = RequestPlan("r", BS)
        r.on_lookup(0, 0, 0)
        r.on_alloc(list(range(20, 28)), 0)
        r.take_save(h, prompt_len)
        assert r.take_tail_save(h, toks, prompt_len, prompt_len, 16) is None
    assert RequestPlan("r", BS).take_tail_save(h, toks, 1000, 1000, 0) is None  # tails off


def test_plan_does_not_save_the_tail_it_loaded():
    h = digests(8)
    toks = list(range(5000, 6000))
    key = tail_keys(h[6], toks[896:], [96])[0]
    p = RequestPlan("r", BS)
    p.on_lookup(0, 7, 7, [0] * 7, tail=(key, 0, 96))
    p.on_alloc(list(range(20, 28)), 7 * BS + 96)
    p.take_load(h[:7])
    assert p.take_save(h[:7], 1000) == (None, [])
    assert p.take_tail_save(h[:7], toks, 1000, 1000, 16) is None
