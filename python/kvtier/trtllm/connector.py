"""kvtier's TensorRT-LLM KV cache connector: KvtierConnectorScheduler and KvtierConnectorWorker.

Written against TensorRT-LLM's PyTorch-backend connector API
(tensorrt_llm/_torch/pyexecutor/kv_cache_connector.py; docs/trtllm.md names the commits read).
Configure it with::

    KvCacheConnectorConfig(connector_module="kvtier.trtllm.connector",
                           connector_scheduler_class="KvtierConnectorScheduler",
                           connector_worker_class="KvtierConnectorWorker",
                           server_url="unix:///run/kvtier/kvtier.sock")

- The scheduler (rank 0 only) keys each request's tokens as a chain of kvtier blocks, one per
  TensorRT-LLM KV block (``kvtier.chain_keys``, each key linked to its parent), looks the chain
  up in every rank's namespace, pins the hit until it is loaded, and tells the workers, through
  the metadata TensorRT-LLM broadcasts each step, which blocks to load and which full blocks
  to save. The block a prompt ends in is saved too, as a tail (``kvtier.vllm.layout.tail_keys``),
  and loaded into the next prompt that continues it: TensorRT-LLM computes the rest of that
  block over the loaded page, as it does after its own partial reuse (docs/trtllm.md).
- Each worker copies whole blocks between the KV pool TensorRT-LLM registers (one tensor,
  ``[num_blocks, num_layers, kv_factor, block elements]``: a block's pages of every layer are
  one run of bytes) and its kvtier.Client's shared-memory segment. Loads are synchronous in
  start_load_kv, before the forward; saves in wait_for_save, after it.
- The API has no way to report a failed load: the engine would attend to garbage, so a load
  that fails raises RuntimeError (the hit was pinned, so only a lost daemon or a corrupt
  block gets there). A failed lookup is a miss; a failed save is logged and skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import kvtier
from kvtier.trtllm.options import KEY_ALGORITHM, ROOT_SEED, connector_options
from kvtier.vllm.layout import (
    RequestPlan,
    batch_ranges,
    combine_shard_lookups,
    contiguous_runs,
    longest_tail,
    matched_tokens,
    page_geometry,
    tail_keys,
    tail_lengths,
)

try:
    from tensorrt_llm._torch.pyexecutor.kv_cache_connector import (
        KvCacheConnectorScheduler,
        KvCacheConnectorWorker,
    )
    from tensorrt_llm._utils import mpi_rank as _mpi_rank
except ImportError:
    # tensorrt_llm imports only where CUDA is: this stand-in holds what the two base classes
    # give a subclass (the llm_args and the worker's bound metadata), so that this module
    # imports anywhere and python/tests/test_trtllm_connector.py can drive it as the executor does.
    class KvCacheConnectorWorker:  # type: ignore[no-redef]
        def __init__(self, llm_args):
            self._llm_args = llm_args
            self._metadata = None

        def bind_connector_meta(self, metadata: object):
            self._metadata = metadata

        def get_connector_meta(self) -> object:
            return self._metadata

        def _clear_connector_meta(self):
            self._metadata = None

    class KvCacheConnectorScheduler:  # type: ignore[no-redef]
        def __init__(self, llm_args):
            self._llm_args = llm_args

    def _mpi_rank() -> int:
        return 0

logger = logging.getLogger("kvtier.trtllm")

_SCHEDULER_SHM_BYTES = 1 << 20  # the scheduler only looks up and pins


@dataclass
class KvtierConnectorMetadata:
    """Scheduler -> workers, once per step (TensorRT-LLM pickles it to every rank)."""

    # (request id, [(block id, key)]): load before this step's forward. Only the blocks the
    # device lacks: kvtier reads a run that starts mid-chain.
    loads: list = field(default_factory=list)
    # (request id, parent key or None, [(block id, key)], tokens each block holds): save after
    # it (tokens_per_block for whole blocks, fewer for a tail)
    saves: list = field(default_factory=list)


def _connect(options, tenant: str, shm_bytes: int):
    try:
        return kvtier.Client.connect_unix(options.socket_path, tenant=tenant, auth_token=options.auth_token,
                                          shared_memory_bytes=shm_bytes)
    except kvtier.KvtierError as e:
        raise type(e)(f"kvtier TensorRT-LLM connector: cannot reach `kvtier serve` at {options.socket_path} "
                      f"(tenant {tenant!r}): {e}; start the daemon or fix server_url") from e


class _TokenChain:
    """A request's block keys, extended as its tokens grow (a partial last block waits)."""

    def __init__(self, block_size: int, lora: str, salt: str):
        self.keys: list = []
        self.tokens = 0  # tokens fed so far
        self._unkeyed: list = []  # the tokens after the last whole block
        self._block_size = block_size
        self._lora = lora
        self._salt = salt

    def extend(self, tokens) -> None:
        self._unkeyed.extend(int(t) for t in tokens)
        self.tokens += len(tokens)
        full = len(self._unkeyed) // self._block_size * self._block_size
        if full:
            self.keys += kvtier.chain_keys(
                self._unkeyed[:full], self._block_size, KEY_ALGORITHM, self.keys[-1] if self.keys else None,
                root_seed=ROOT_SEED, cache_salt=self._salt, lora_name=self._lora,
                first_token=len(self.keys) * self._block_size)
            del self._unkeyed[:full]


def _chain_of(request, block_size: int) -> Optional[_TokenChain]:
    """The request's chain, or None when its tokens alone do not determine its KV
    (multimodal inputs: the placeholder tokens of two images are the same)."""
    if getattr(request, "multimodal_hashes", None):
        return None
    lora = getattr(request, "lora_task_id", None)
    salt = getattr(request, "cache_salt_id", None)
    return _TokenChain(block_size, "" if lora is None else str(lora), "" if salt is None else str(salt))


class KvtierConnectorScheduler(KvCacheConnectorScheduler):
    """Runs on rank 0 inside TensorRT-LLM's executor; never shared between threads."""

    def __init__(self, llm_args):
        super().__init__(llm_args)
        self._options = connector_options(llm_args)
        self._block_size = self._options.block_size
        # One client per rank's namespace: a block counts only when every rank has it.
        self._clients = [_connect(self._options, t, _SCHEDULER_SHM_BYTES) for t in self._options.tenants]
        self._plans: dict = {}  # request id -> RequestPlan
        self._chains: dict = {}  # request id -> _TokenChain (absent: not cached by kvtier)
        self._external: dict = {}  # request id -> tokens promised, until its first metadata
        self._pins: dict = {}  # request id -> [(client, pin id)]
        self._loading: list = []  # request ids whose loads went out in the last metadata
        self._sent: dict = {}  # request id -> tokens its scheduler outputs have carried so far
        # request id -> its prompt's tokens, until the step that computes the prompt's last one
        # has saved the block it ends in as a tail (under chunked prefill that step comes later,
        # and scheduler outputs carry each token id once)
        self._prompts: dict = {}
        # A granularity of tokens_per_block or more leaves no tail length below a whole block.
        self._tails_on = bool(tail_lengths(self._block_size - 1, self._block_size, self._options.partial_block_tokens))
        self.stats = {"lookups": 0, "hit_tokens": 0, "lookup_errors": 0, "tail_hits": 0, "tail_hit_tokens": 0}

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        req_id = request.request_id
        bs = self._block_size
        self._release_pins(req_id)
        self._plans.pop(req_id, None)
        self._prompts.pop(req_id, None)
        chain = _chain_of(request, bs)
        if chain is None:
            self._chains.pop(req_id, None)
            return 0, False
        tokens = list(request.get_tokens(0))
        chain.extend(tokens)
        self._chains[req_id] = chain
        if self._tails_on:
            self._prompts[req_id] = tokens
        plan = self._plans[req_id] = RequestPlan(req_id, bs)
        local = num_computed_tokens // bs
        stored = worth = 0
        found = None
        if chain.keys and num_computed_tokens % bs == 0:
            # A partly reused block (TensorRT-LLM's partial reuse) would split a kvtier block:
            # then nothing is loaded (no tail either) and only what the engine computes is saved.
            try:
                found = [c.lookup([chain.keys])[0] for c in self._clients]
                stored, worth, _ = combine_shard_lookups(found)
            except kvtier.KvtierError as e:
                self.stats["lookup_errors"] += 1
                logger.warning("kvtier: lookup failed (treated as a miss): %s", e)
        usable = min(stored, worth) if self._options.use_cost_model else stored
        if usable > local and max(max(r[3][local:usable]) for r in found) > self._options.shared_memory_bytes:
            # The lookup starts at the root so that `stored` also tells which of the device's
            # blocks kvtier lacks (they are saved); the load reads only blocks [local, end),
            # as many Gets as the worker's segment needs. A block larger than the segment
            # cannot be read at all (the worker refuses such a pool at registration).
            usable = local
        ext, ext_tokens = matched_tokens(len(chain.keys), len(tokens), bs, local, usable)
        tail = self._find_tail(chain, tokens, local + ext, stored) if found is not None else None
        # The tail is stored as a child of the hit's last block (or of the device's last), so
        # the blocks and the tail are one run: one pin per namespace holds them all, and the
        # worker reads them as it reads any run of blocks.
        run = chain.keys[local:local + ext] + ([tail[0]] if tail is not None else [])
        if run:
            held = self._pin(req_id, run)
            if held < len(run):
                tail = None
            if held < ext:
                stored = local + held  # left the store since the lookup: saved again if computed
                ext, ext_tokens = matched_tokens(stored, len(tokens), bs, local, stored)
        if tail is not None:
            ext_tokens = ext * bs + tail[2]
            self.stats["tail_hits"] += 1
            self.stats["tail_hit_tokens"] += tail[2]
        plan.on_lookup(local, stored, ext, tail=tail)
        self._external[req_id] = ext_tokens
        self.stats["lookups"] += 1
        self.stats["hit_tokens"] += ext_tokens
        return ext_tokens, False

    def _find_tail(self, chain: _TokenChain, tokens, first: int, stored: int) -> Optional[tuple]:
        """(key, fastest tier, tokens it gives) of the longest stored tail of block ``first``
        (the first block the engine would compute) that the prompt ``tokens`` continues, or
        None. Only where kvtier holds no whole block ``first`` (``stored`` blocks from 0), a
        block precedes it to name the tail's prefix, and the engine still computes a token
        after it; one more lookup round trip, for every candidate length together."""
        bs = self._block_size
        start = first * bs
        usable = len(tokens) - 1 - start  # the engine computes at least the prompt's last token
        if first < 1 or stored > first or usable < 1:
            return None
        candidate = tokens[start:start + bs - 1]
        lengths = tail_lengths(len(candidate), bs, self._options.partial_block_tokens)
        if not lengths:
            return None
        try:
            keys = tail_keys(chain.keys[first - 1], candidate, lengths)
        except ValueError as e:  # a token id that does not fit in 32 bits
            logger.warning("kvtier: no tail lookup: %s", e)
            return None
        try:
            found = [c.lookup([[k] for k in keys]) for c in self._clients]
        except kvtier.KvtierError as e:
            self.stats["lookup_errors"] += 1
            logger.warning("kvtier: tail lookup failed (treated as a miss): %s", e)
            return None
        i = longest_tail(found, self._options.use_cost_model)
        if i < 0 or max(r[i][3][0] for r in found) > self._options.shared_memory_bytes:
            return None  # a page larger than the worker's segment cannot be read (see above)
        _, _, tiers = combine_shard_lookups([r[i] for r in found])
        return keys[i], tiers[0], min(lengths[i], usable)

    def _pin(self, req_id, keys) -> int:
        """Pins ``keys`` (a run: the hit's blocks, then its tail) in every namespace until its
        load has run (a pin holds the stored prefix of the run it is given, from its first
        block); how many of them, from the first, every namespace still holds."""
        held = len(keys)
        pins = self._pins[req_id] = []
        try:
            for c in self._clients:
                pin_id, pinned = c.pin(keys)
                pins.append((c, pin_id))
                held = min(held, pinned)
        except kvtier.KvtierError as e:
            logger.warning("kvtier: pin failed (treated as a miss): %s", e)
            held = 0
        if held == 0:
            self._release_pins(req_id)
        return held

    def _release_pins(self, req_id) -> None:
        for c, pin_id in self._pins.pop(req_id, []):
            try:
                c.unpin(pin_id)
            except kvtier.KvtierError as e:
                logger.warning("kvtier: unpin failed (the server drops it with the connection): %s", e)

    def update_state_after_alloc(self, request, block_ids):
        plan = self._plans.get(request.request_id)
        if plan is not None:
            plan.on_alloc(list(block_ids), self._external.get(request.request_id, 0))

    def build_connector_meta(self, scheduler_output) -> KvtierConnectorMetadata:
        # The loads of the last metadata ran in its start_load_kv, before this call.
        for req_id in self._loading:
            self._release_pins(req_id)
        self._loading = []
        meta = KvtierConnectorMetadata()
        for rd, is_new in ([(rd, True) for rd in scheduler_output.new_requests]
                           + [(rd, False) for rd in scheduler_output.cached_requests]):
            req_id = rd.request_id
            plan, chain = self._plans.get(req_id), self._chains.get(req_id)
            if plan is None or chain is None:
                continue
            if is_new:
                plan.set_blocks(rd.new_block_ids)
            else:
                plan.append_blocks(rd.new_block_ids)
            # new_tokens: the request's tokens since its last scheduler output (all of them in
            # its first); the chain already holds the prompt the lookup keyed.
            sent = self._sent.get(req_id, 0)
            self._sent[req_id] = sent + len(rd.new_tokens)
            skip = chain.tokens - sent
            if len(rd.new_tokens) > skip:
                chain.extend(rd.new_tokens[skip:])
            loads = plan.take_load(chain.keys)
            if loads:
                meta.loads.append((req_id, loads))
                self._loading.append(req_id)
            # TensorRT-LLM leaves the connector's tokens out of a new request's computed_position.
            done = rd.computed_position + rd.num_scheduled_tokens + (self._external.pop(req_id, 0) if is_new else 0)
            parent, saves = plan.take_save(chain.keys, done)
            if saves:
                meta.saves.append((req_id, parent, saves, self._block_size))
            prompt = self._prompts.get(req_id)
            if prompt is not None:
                self._save_tail(meta, plan, chain, prompt, done)
        return meta

    def _save_tail(self, meta, plan: RequestPlan, chain: _TokenChain, prompt, done: int) -> None:
        """Adds the block the prompt ends in, as a tail, to the saves of the step that computes
        the prompt's last token (after the step's whole blocks: the tail's parent is saved
        first), and then forgets the prompt."""
        req_id = plan.req_id
        try:
            tail = plan.take_tail_save(chain.keys, prompt, len(prompt), done, self._options.partial_block_tokens)
        except ValueError as e:  # a token id that does not fit in 32 bits: no tail, the step goes on
            logger.warning("kvtier: request %s: no tail saved: %s", req_id, e)
            tail = None
        if tail is not None:
            meta.saves.append((req_id, *tail))  # (parent, [(block id, key)], tokens)
        if plan.tail_saved:
            del self._prompts[req_id]

    def request_finished(self, request, cache_block_ids) -> bool:
        req_id = request.request_id
        self._release_pins(req_id)
        for table in (self._plans, self._chains, self._external, self._sent, self._prompts):
            table.pop(req_id, None)
        return False  # saves are synchronous: the blocks may be freed now

    def close(self) -> None:
        for req_id in list(self._pins):
            self._release_pins(req_id)
        for c in self._clients:
            c.close()


def _rows(pool):
    """A ``uint8 [num_blocks, block_bytes]`` view of the pool (a torch tensor on any device, or
    a numpy array), and a function that views a bytes-like object the same way."""
    if type(pool).__module__.startswith("torch"):
        import torch

        elem, strides, u8 = pool.element_size(), tuple(pool.stride()), torch.uint8

        def frombuffer(buf):
            return torch.frombuffer(buf, dtype=torch.uint8)
    else:
        import numpy

        elem, u8 = pool.itemsize, numpy.uint8
        strides = tuple(s // elem for s in pool.strides)

        def frombuffer(buf):
            return numpy.frombuffer(buf, dtype=numpy.uint8)
    shape = tuple(pool.shape)
    if len(shape) == 1:
        raise NotImplementedError(f"kvtier TensorRT-LLM connector: a KV pool of shape {list(shape)}: expected "
                                  "[num_blocks, ...] (one pool; VSWA's several pools are not supported)")
    geo = page_geometry(shape, strides, elem)
    if geo.block_stride_bytes != geo.page_bytes and shape[0] > 1:
        raise NotImplementedError(f"kvtier TensorRT-LLM connector: the KV pool's blocks are "
                                  f"{geo.block_stride_bytes} bytes apart but {geo.page_bytes} long; "
                                  "only a contiguous pool is supported")
    return pool.reshape(shape[0], -1).view(u8), geo.page_bytes, frombuffer


class KvtierConnectorWorker(KvCacheConnectorWorker):
    """Runs on every rank, on the executor's thread."""

    def __init__(self, llm_args):
        super().__init__(llm_args)
        self._options = connector_options(llm_args)
        rank = int(_mpi_rank())
        if not 0 <= rank < len(self._options.tenants):
            raise ValueError(f"kvtier TensorRT-LLM connector: rank {rank} outside tensor_parallel_size "
                             f"{self._options.tp_size}")
        self._rank = rank
        self._client = _connect(self._options, self._options.tenants[rank], self._options.shared_memory_bytes)
        self._shm = self._client.shared_memory
        self._staging = None
        self._rows = None
        self._block_bytes = 0
        self.stats = {"loaded_blocks": 0, "saved_blocks": 0, "refused_blocks": 0, "save_errors": 0}

    def register_kv_caches(self, kv_cache_tensor):
        rows, block_bytes, frombuffer = _rows(kv_cache_tensor)
        if block_bytes > len(self._shm):
            raise ValueError(f"kvtier TensorRT-LLM connector: a KV block is {block_bytes} bytes, the shared "
                             f"memory segment {len(self._shm)}: raise shared_memory_bytes in server_url")
        self._rows, self._block_bytes = rows, block_bytes
        self._staging = frombuffer(self._shm)
        logger.info("kvtier: rank %d, %d blocks of %d bytes, tenant %r", self._rank, rows.shape[0], block_bytes,
                    self._options.tenants[self._rank])

    def _meta(self) -> Optional[KvtierConnectorMetadata]:
        meta = self.get_connector_meta()
        return meta if isinstance(meta, KvtierConnectorMetadata) else None

    def start_load_kv(self, stream):
        meta = self._meta()
        if meta is None or not meta.loads:
            return
        if self._rows is None:
            raise RuntimeError("kvtier TensorRT-LLM connector: start_load_kv before register_kv_caches")
        for req_id, blocks in meta.loads:
            # A hit longer than the segment is read a segment's worth of blocks at a time.
            for lo, hi in batch_ranges(len(blocks), self._block_bytes, len(self._shm)):
                self._load(req_id, blocks[lo:hi])

    def _load(self, req_id, blocks):
        """Reads ``blocks`` ((device block, key) pairs, a segment's worth at most) in one Get
        and copies them into the pool."""
        bb = self._block_bytes
        keys = [k for _, k in blocks]
        n = len(keys)
        try:
            sizes = self._client.get(keys, [self._shm[j * bb:(j + 1) * bb] for j in range(n)])
        except kvtier.KvtierError as e:
            raise RuntimeError(f"kvtier TensorRT-LLM connector: request {req_id}: loading {n} blocks "
                               f"TensorRT-LLM counts as computed failed ({e}); the engine cannot "
                               "recompute them, so this step stops here") from e
        if len(sizes) != n or any(s != bb for s in sizes):
            raise RuntimeError(f"kvtier TensorRT-LLM connector: request {req_id}: kvtier returned "
                               f"{len(sizes)} of {n} blocks, sizes {sorted(set(sizes))} for {bb}-byte "
                               "blocks (another layout under the same namespace?); set model= in "
                               "server_url to separate them")
        src = self._staging[:n * bb].reshape(n, bb)
        for i, b, count in contiguous_runs([b for b, _ in blocks]):
            self._rows[b:b + count] = src[i:i + count]
        self.stats["loaded_blocks"] += n

    def wait_for_layer_load(self, layer_idx: int, stream):
        return  # every layer is in before the forward starts (start_load_kv is synchronous)

    def save_kv_layer(self, layer_idx: int, stream):
        return  # whole blocks are copied in wait_for_save

    def wait_for_save(self, stream):
        meta = self._meta()
        if meta is None or not meta.saves or self._rows is None:
            return
        if stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()  # the forward that wrote the pages has finished
        bb = self._block_bytes
        for req_id, parent, blocks, tokens in meta.saves:
            for lo, hi in batch_ranges(len(blocks), bb, len(self._shm)):
                part = blocks[lo:hi]
                n = len(part)
                keys = [k for _, k in part]
                dst = self._staging[:n * bb].reshape(n, bb)
                for i, b, count in contiguous_runs([b for b, _ in part]):
                    dst[i:i + count] = self._rows[b:b + count]
                try:
                    r = self._client.put(keys, [self._shm[j * bb:(j + 1) * bb] for j in range(n)],
                                         parent=parent, tokens=tokens)
                except kvtier.KvtierError as e:
                    self.stats["save_errors"] += 1
                    logger.warning("kvtier: saving %d blocks of request %s failed (skipped): %s", n, req_id, e)
                    break
                self.stats["saved_blocks"] += r.new_blocks
                self.stats["refused_blocks"] += r.refused_blocks
                if r.refused_blocks:
                    break  # the chain is broken: later blocks would have no parent
                parent = keys[-1]

    def get_finished(self, finished_gen_req_ids, started_loading_req_ids):
        return [], []  # nothing is asynchronous: no request waits on this connector

    def close(self) -> None:
        self._staging = self._rows = None
        self._shm = None
        self._client.close()
