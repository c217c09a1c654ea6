"""Pure helpers of the kvtier vLLM connector: no vLLM, torch or numpy import.

They hold every decision that does not need a live engine, so python/tests/test_vllm_layout.py
can check them under plain python3: how many tokens a kvtier hit gives vLLM, which blocks a
step loads and saves, the page geometry read from a KV tensor's shape and strides, batching
through the shared-memory segment, and the namespace a model's blocks live in.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Optional, Sequence

KEY_BYTES = 16


def block_key(block_hash: bytes) -> bytes:
    """The kvtier key of a vLLM block hash: its first 16 bytes (python/src/keys.cc:
    BlockKey::FromDigestBytes over the first 16 bytes of a digest)."""
    b = bytes(block_hash)
    if len(b) < KEY_BYTES:
        raise ValueError(f"a block hash has {len(b)} bytes; kvtier keys need at least {KEY_BYTES}")
    return b[:KEY_BYTES]


def matched_tokens(num_hashes: int, num_tokens: int, block_size: int, local_blocks: int,
                   stored_prefix: int) -> tuple[int, int]:
    """(blocks, tokens) kvtier can add beyond vLLM's local hit.

    ``stored_prefix`` is kvtier's longest stored prefix of the request's chain (in blocks from
    block 0), ``local_blocks`` the blocks vLLM already has (block-aligned num_computed_tokens).
    Every stored whole block counts, the one holding the prompt's last token too: vLLM must
    compute at least one token to sample from, so the tokens stop one short of the prompt
    (num_tokens - 1), and vLLM recomputes that last token over its loaded slot (as LMCache
    does). Without it a block-aligned prompt would recompute a whole block.
    """
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    if num_tokens <= 1:
        return 0, 0
    limit = min(num_hashes, num_tokens // block_size)
    blocks = max(0, min(stored_prefix, limit) - local_blocks)
    tokens = min(blocks * block_size, num_tokens - 1 - local_blocks * block_size)
    return (blocks, tokens) if tokens > 0 else (0, 0)


# A partial block (a "tail"): the first t tokens of the block a prompt ends in. vLLM hashes
# whole blocks only, so a multi-turn conversation's next prompt, which extends the last one,
# finds every whole block but would recompute the tokens of the block the last prompt ended
# in. The connector stores that block's page under a key that names the block before it (its
# vLLM hash, which covers every token, LoRA and cache salt before it) and the t tokens, so a
# later request whose tokens continue the same way loads those t tokens. Tails are stored at
# lengths that are multiples of a granularity, so that a lookup asks for a few candidate
# lengths (block_size / granularity at most), not every one.
_TAIL_DOMAIN = b"kvtier-vllm-tail\0"
# The connector's default granularity (kv_connector_extra_config "partial_block_tokens"):
# fewer than block_size / 16 candidates per lookup (7 at vLLM's CPU block of 128), and a tail reuses
# all but up to 15 of the tokens a prompt left in its last block. 0 turns tails off.
DEFAULT_TAIL_GRANULARITY = 16


def tail_lengths(available: int, block_size: int, granularity: int) -> list:
    """The tail lengths a lookup asks for when ``available`` tokens of a request follow a block
    boundary: multiples of ``granularity`` below ``block_size`` (a whole block is a block, not
    a tail), at most ``available``; ascending. Empty when ``granularity`` is 0 (tails off)."""
    if granularity < 0 or block_size <= 0:
        raise ValueError("granularity must be >= 0 and block_size positive")
    if granularity == 0:
        return []
    return list(range(granularity, min(block_size - 1, available) + 1, granularity))


def tail_keys(parent_hash: bytes, tokens: Sequence[int], lengths: Sequence[int]) -> list:
    """The key of the tail of each length in ``lengths`` (ascending, each at most len(tokens)):
    16 bytes of SHA-256 over a domain tag, the vLLM hash of the block before it, and its first
    t token ids as little-endian uint32."""
    h = hashlib.sha256(_TAIL_DOMAIN + bytes(parent_hash))
    keys, done = [], 0
    for t in lengths:
        if t < done or t > len(tokens):
            raise ValueError(f"tail lengths must ascend within the {len(tokens)} tokens given; got {list(lengths)}")
        try:
            h.update(struct.pack(f"<{t - done}I", *tokens[done:t]))
        except struct.error as e:
            raise ValueError(f"a token id does not fit in 32 bits: {e}") from None
        done = t
        keys.append(h.copy().digest()[:KEY_BYTES])
    return keys


def longest_tail(shard_results: Sequence[Sequence], use_worth: bool = True) -> int:
    """The index of the longest tail every shard stores (and, with ``use_worth``, finds worth
    loading): ``shard_results[s][i]`` is shard s's lookup of the i-th candidate, candidates
    ascending in length, each (stored prefix, blocks worth loading, ...) as in
    combine_shard_lookups. -1 when none is."""
    if not shard_results:
        return -1
    for i in reversed(range(len(shard_results[0]))):
        stored, worth, _ = combine_shard_lookups([r[i] for r in shard_results])
        if stored >= 1 and (not use_worth or worth >= 1):
            return i
    return -1


# Tiers a block is slow to come back from: a request whose blocks sit there is loaded
# asynchronously (vLLM parks it in WAITING_FOR_REMOTE_KVS and keeps scheduling the others).
SLOW_TIER_KINDS = frozenset({"nvme", "remote_pool", "parallel_fs"})
ASYNC_LOAD_MODES = ("auto", "always", "never")

# vLLM's CacheHitSource values (vllm/v1/metrics/cache_hit_source.py) by kvtier tier kind.
_HIT_SOURCE_OF_KIND = {"gpu_hbm": "device", "cpu_dram": "host", "cxl_memory": "host", "nvme": "disk",
                       "parallel_fs": "disk", "remote_pool": "external_unspecified"}


def load_asynchronously(mode: str, tiers: Sequence[int], tier_kinds: Sequence[str]) -> bool:
    """Whether to load blocks whose fastest tiers are ``tiers`` (indices into ``tier_kinds``,
    the server's tiers) asynchronously. ``auto``: when any of them is in a slow tier, or in a
    tier the server did not describe."""
    if mode not in ASYNC_LOAD_MODES:
        raise ValueError(f"async_load must be one of {', '.join(ASYNC_LOAD_MODES)}, not {mode!r}")
    if not tiers or mode == "never":
        return False
    if mode == "always":
        return True
    return any(not 0 <= t < len(tier_kinds) or tier_kinds[t] in SLOW_TIER_KINDS for t in tiers)


def hit_sources(tiers: Sequence[int], tier_kinds: Sequence[str], block_size: int,
                tokens: Optional[int] = None) -> dict:
    """Tokens per vLLM CacheHitSource value for blocks in ``tiers``, ``tokens`` of them in all
    (default: every block whole; fewer when the last block is loaded for all but its last
    token, matched_tokens)."""
    out: dict = {}
    left = len(tiers) * block_size if tokens is None else tokens
    for t in tiers:
        if left <= 0:
            break
        kind = tier_kinds[t] if 0 <= t < len(tier_kinds) else ""
        source = _HIT_SOURCE_OF_KIND.get(kind, "external_unspecified")
        out[source] = out.get(source, 0) + min(block_size, left)
        left -= block_size
    return out


@dataclass
class RequestPlan:
    """The scheduler side's state of one request.

    Blocks [0, stored_prefix) are in kvtier (as of the last lookup); vLLM computed
    [0, local_blocks) itself, and kvtier loads [local_blocks, local_blocks + ext_blocks), then
    ``tail`` (when set) into the block after them.
    saved_upto: blocks below it are in kvtier or already scheduled to be saved; every block
    the request completes from there on is saved once, in order, each under the previous
    block's key, so the chain stays whole. Once the prompt is computed, the block it ends in
    is saved as a tail (take_tail_save), once.
    """

    req_id: str
    block_size: int
    local_blocks: int = 0
    stored_prefix: int = 0
    ext_blocks: int = 0
    saved_upto: int = 0
    block_ids: list = field(default_factory=list)  # per block position, as the connector names it (block_rows)
    load_pending: bool = False
    load_async: bool = False
    tiers: list = field(default_factory=list)  # per stored block: its fastest tier
    tail: Optional[tuple] = None  # (key, fastest tier, tokens it gives) of the tail to load
    tail_saved: bool = False

    def on_lookup(self, local_blocks: int, stored_prefix: int, ext_blocks: int, tiers: Sequence[int] = (),
                  load_async: bool = False, tail: Optional[tuple] = None) -> None:
        self.local_blocks = local_blocks
        self.stored_prefix = stored_prefix
        self.ext_blocks = ext_blocks
        self.saved_upto = stored_prefix
        self.load_pending = False
        self.tiers = list(tiers)
        self.tail = tail
        self.load_async = load_async and (ext_blocks > 0 or tail is not None)

    def ext_tiers(self) -> list:
        """The tiers of the blocks kvtier loads, the tail's last."""
        tiers = self.tiers[self.local_blocks:self.local_blocks + self.ext_blocks]
        return tiers + [self.tail[1]] if self.tail is not None else tiers

    def on_alloc(self, block_ids: Sequence[int], num_external_tokens: int) -> None:
        self.block_ids = list(block_ids)
        # The scheduler may keep fewer external tokens than offered (it never takes more); a
        # block it keeps part of is loaded whole, and vLLM computes over the rest of it. The
        # tail loads only when the scheduler kept some of its tokens.
        if self.tail is not None and num_external_tokens <= self.ext_blocks * self.block_size:
            self.tail = None
        self.ext_blocks = min(self.ext_blocks, -(-num_external_tokens // self.block_size))
        self.load_pending = self.ext_blocks > 0 or self.tail is not None

    def set_blocks(self, block_ids: Sequence[int]) -> None:
        self.block_ids = list(block_ids)

    def append_blocks(self, block_ids: Sequence[int]) -> None:
        self.block_ids.extend(block_ids)

    def take_load(self, block_hashes: Sequence[bytes]) -> list:
        """(block_id, key) of every block to load this step (once)."""
        if not self.load_pending:
            return []
        self.load_pending = False
        lo, end = self.local_blocks, self.local_blocks + self.ext_blocks
        hi = min(end, len(self.block_ids), len(block_hashes))
        loads = [(self.block_ids[i], block_key(block_hashes[i])) for i in range(lo, hi)]
        if self.tail is not None and hi == end and end < len(self.block_ids):
            loads.append((self.block_ids[end], self.tail[0]))
        return loads

    def take_save(self, block_hashes: Sequence[bytes], tokens_after_step: int):
        """(parent_key or None, [(block_id, key)]) of the blocks this step completes that
        kvtier lacks; advances saved_upto."""
        full = min(tokens_after_step // self.block_size, len(block_hashes), len(self.block_ids))
        if full <= self.saved_upto:
            return None, []
        lo = self.saved_upto
        parent = block_key(block_hashes[lo - 1]) if lo > 0 else None
        blocks = [(self.block_ids[i], block_key(block_hashes[i])) for i in range(lo, full)]
        self.saved_upto = full
        return parent, blocks

    def take_tail_save(self, block_hashes: Sequence[bytes], token_ids: Sequence[int], prompt_tokens: int,
                       tokens_after_step: int, granularity: int):
        """(parent key, [(block_id, tail key)], tail tokens) of the block the prompt ends in, once the step
        that computes the prompt's last token has run (call take_save first: the tail's parent
        must be saved or stored already); None otherwise, and after the first call that could
        save it. The tail holds the prompt's tokens of that block, rounded down to a multiple
        of ``granularity``; none when that is 0, or when the prompt's first block is partial
        (no vLLM hash before it names what precedes it)."""
        if self.tail_saved or tokens_after_step < prompt_tokens:
            return None
        self.tail_saved = True
        j, t = divmod(prompt_tokens, self.block_size)
        if granularity <= 0:
            return None
        t -= t % granularity
        if t <= 0 or j < 1 or j > len(block_hashes) or j >= len(self.block_ids) or self.saved_upto < j:
            return None
        start = j * self.block_size
        key = tail_keys(block_hashes[j - 1], token_ids[start:start + t], [t])[0]
        if self.tail is not None and self.tail[0] == key:
            return None  # it loaded this very tail
        return block_key(block_hashes[j - 1]), [(self.block_ids[j], key)], t


@dataclass(frozen=True)
class PageGeometry:
    num_blocks: int
    page_bytes: int  # one block of one layer, as one run of bytes
    block_stride_bytes: int  # distance between consecutive blocks' pages


def page_geometry(shape: Sequence[int], stride: Sequence[int], elem_size: int) -> PageGeometry:
    """The page geometry of a per-layer KV tensor whose first dimension is the block.

    The page (everything below dimension 0) must be one contiguous run of bytes: dimensions
    of size 1 are ignored, every other stride must equal the product of the sizes inside it.
    Pages may be spaced wider than they are long (block_stride >= page), never overlap.
    """
    if len(shape) != len(stride) or len(shape) < 2:
        raise ValueError(f"expected a [num_blocks, ...] tensor, got shape {list(shape)} stride {list(stride)}")
    if elem_size <= 0:
        raise ValueError("elem_size must be positive")
    expected = 1
    for size, st in reversed(list(zip(shape[1:], stride[1:]))):
        if size == 1:
            continue
        if st != expected:
            raise ValueError(
                f"the page of a KV tensor of shape {list(shape)} and stride {list(stride)} is not "
                "contiguous; kvtier copies whole pages as bytes")
        expected *= size
    page_elems = expected
    if shape[0] > 1 and stride[0] < page_elems:
        raise ValueError(f"pages overlap: block stride {stride[0]} < page of {page_elems} elements")
    return PageGeometry(int(shape[0]), page_elems * elem_size, int(stride[0]) * elem_size)


def contiguous_runs(block_ids: Sequence[int], skip: Optional[int] = None) -> list:
    """(index, block id, count) for each run of consecutive block ids: a run's pages are one
    slice of a layer's KV tensor, copied at memcpy speed, where index_copy_/index_select over
    the same rows run at a fifth of it (1 against 5 GB/s measured on 2 MiB blocks). Ids equal
    to ``skip`` (vLLM's null block) are in no run."""
    runs: list = []
    for i, b in enumerate(block_ids):
        if b == skip:
            continue
        if runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == b:
            runs[-1][2] += 1
        else:
            runs.append([i, b, 1])
    return [tuple(r) for r in runs]


# vLLM's null block (BlockPool.null_block, always id 0): what a sliding-window group's block
# table holds where the window has passed, in place of a block that was freed or never
# allocated. Under the hybrid allocator (several KV cache groups) the connector handles one
# row of block ids per block position, one id per group, and a row may hold it.
NULL_BLOCK_ID = 0


def block_rows(group_block_ids: Sequence[Sequence[int]]) -> list:
    """vLLM's block tables, one list per KV cache group (KVCacheBlocks.get_block_ids(), or a
    scheduler output's block_ids), as one row per block position: the ids of that position's
    block in every group. Every group's table is positional (a sliding-window group's holds
    the null block where its window has passed), so the lists have one length; they are
    refused otherwise, as pages saved under the wrong key would be served to other requests."""
    lengths = {len(ids) for ids in group_block_ids}
    if len(lengths) > 1:
        raise ValueError(f"KV cache groups with block tables of different lengths {sorted(lengths)}: "
                         "the connector needs one block per group at every position (vLLM's "
                         "--disable-hybrid-kv-cache-manager keeps every layer in one group)")
    return list(zip(*group_block_ids))


def saveable(parent: Optional[bytes], blocks: list) -> tuple:
    """(parent, blocks) of a save, [(row, key)] in chain order, cut to the blocks every group
    still holds: a row with the null block lost that group's pages (a sliding window passed
    it), so the save starts after the last such row, under that row's key."""
    last = max((i for i, (row, _) in enumerate(blocks) if NULL_BLOCK_ID in row), default=-1)
    if last < 0:
        return parent, blocks
    return blocks[last][1], blocks[last + 1:]


def row_block_ids(rows) -> list:
    """The block ids in rows, every group's, without the null block."""
    return [b for row in rows for b in row if b != NULL_BLOCK_ID]


def batch_ranges(count: int, item_bytes: int, capacity: int) -> list:
    """[start, end) ranges of items that fit in capacity bytes each."""
    if item_bytes <= 0:
        raise ValueError("item_bytes must be positive")
    per = capacity // item_bytes
    if per == 0:
        raise ValueError(
            f"a block of {item_bytes} bytes does not fit in the {capacity}-byte shared memory segment; "
            "raise shared_memory_bytes")
    return [(s, min(s + per, count)) for s in range(0, count, per)]


def natural_layer_order(names) -> list:
    """Layer names in model order: numbers compare as numbers (layers.10 after layers.9)."""
    def key(name: str):
        return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]

    return sorted(names, key=key)


def layout_fingerprint(description: dict) -> str:
    """16 hex digits of SHA-256 over the canonical JSON of a layout description."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def namespace_tenant(tenant: str, model: Optional[str], fingerprint: str) -> str:
    """The kvtier tenant a model's blocks live under: tenant/model/layout-fingerprint."""
    return f"{tenant}/{model or ''}/{fingerprint}"


def shard_tenants(tenant: str, tp_size: int, replicated: bool) -> list:
    """The tenant each tensor-parallel rank's blocks live under. Each rank holds other KV heads,
    so each has its own namespace ("{tenant}/tp{rank}of{size}"). A replicated cache (MLA's
    latent cache is the same on every rank) has one namespace: rank 0 saves it, all load it."""
    if tp_size < 1:
        raise ValueError("tensor_parallel_size must be at least 1")
    if tp_size == 1 or replicated:
        return [tenant]
    return [f"{tenant}/tp{rank}of{tp_size}" for rank in range(tp_size)]


def combine_shard_lookups(results: Sequence) -> tuple:
    """One answer from every shard's lookup of the same chain, each (stored prefix, blocks
    worth loading, fastest tier per stored block, sizes): vLLM can skip a block only if every
    rank has it, and the load is as slow as the slowest rank's copy (tiers are numbered from
    the fastest). Returns (stored, worth, tiers)."""
    if not results:
        return 0, 0, []
    stored = min(r[0] for r in results)
    worth = min(r[1] for r in results)
    tiers = [max(r[2][i] for r in results) for i in range(stored)]
    return stored, worth, tiers
