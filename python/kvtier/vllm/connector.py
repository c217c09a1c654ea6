"""kvtier.vllm.connector.KvtierConnector: a vLLM v1 KV connector over `kvtier serve`.

Written against vLLM 0.32.0 (KVConnectorBase_V1; tools/vllm/README.md). Design: docs/vllm.md.

- Both roles (the scheduler in the engine-core process, the worker in the worker process)
  open their own kvtier.Client on the Unix socket named by kv_connector_extra_config
  ["socket_path"]; payloads travel through the worker's shared-memory segment.
- Keys are vLLM's own request.block_hashes (their first 16 bytes), under the tenant
  "{tenant}/{model}/{layout fingerprint}" so that two models or layouts never share blocks;
  under tensor parallelism each rank has its own ".../tp{rank}of{size}" (MLA: one copy).
- One kvtier block per vLLM block position: all layers' pages of the block, concatenated in
  layer order, copied as opaque bytes (the CPU GQA page interior is transposed; never sliced).
  Hybrid models (several KV cache groups: sliding-window and full attention) name a position
  by a row of block ids, one per group (layout.block_rows); a sliding group's null block is
  neither saved nor loaded, and their loads are asynchronous (docs/vllm.md, "Hybrid models").
- Loads run on the worker's loader thread (kvtier.vllm.loader) with their own client and
  segment. Blocks in fast tiers load synchronously and layer-pipelined: start_load_kv, which
  vLLM runs before the forward of a step with sync loads, starts the copy and
  wait_for_layer_load(layer) waits only for that layer. Blocks in a slow tier (NVMe, remote,
  parallel filesystem; extra config "async_load") load asynchronously: the scheduler returns
  (n, True), vLLM parks the request, and get_finished reports it once its blocks are in.
- Saves leave the step (kvtier.vllm.saver): wait_for_save, after the forward that completed
  the blocks, copies their pages into the saver's staging segment and returns; the saver
  thread puts them with its own client and segment. request_finished returns False (vLLM
  frees the blocks at once: their pages are in the staging); each worker reports a finished
  request once its puts landed, in the connector's worker metadata (KvtierWorkerMetadata), and
  until every worker did, the scheduler defers a lookup whose next block is still on its way.

Threads: the scheduler role runs on vLLM's engine-core thread only. The worker role runs on
vLLM's worker thread, plus the loader's and the saver's threads, each with its own client and
segment; they share only what BlockLoader and BlockSaver guard (their headers say how).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
    SupportsHMA,
)
from vllm.logger import init_logger

import kvtier
from kvtier.vllm.landing import LandingSaves
from kvtier.vllm.layout import (
    DEFAULT_TAIL_GRANULARITY,
    NULL_BLOCK_ID,
    RequestPlan,
    block_key,
    block_rows,
    combine_shard_lookups,
    contiguous_runs,
    hit_sources,
    layout_fingerprint,
    load_asynchronously,
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
from kvtier.vllm.loader import BlockLoader, LoadJob
from kvtier.vllm.pins import SavePins
from kvtier.vllm.saver import BlockSaver, SaveJob

logger = init_logger(__name__)

_CONTROL_SHM_BYTES = 1 << 20  # lookups and control requests: no payload travels on this connection
_DEFAULT_SHM_BYTES = 256 << 20
_DEFAULT_LOAD_BUFFER_BYTES = 512 << 20  # a step that fits is layer-pipelined (16k tokens of Llama-8B: 2 GiB)
# A lookup waits (returns None) for a finished request's puts at most this long after it
# finished; past it, a worker that never reports does not hold other requests forever.
_LANDING_WAIT_S = 10.0


# KV cache specs whose block table is not one block per block_size tokens of the prompt, or
# whose pages do not follow from the tokens before them: a kvtier block keyed by vLLM's block
# hash could not stand for them. Looked up by name: not every vLLM build defines all of them.
_REFUSED_SPECS = ("MambaSpec", "CircularBufferSpec", "CrossAttentionSpec", "EncoderOnlyAttentionSpec",
                  "HiSparseHotSpec", "HiSparseResidentSpec")


def _transfer_groups(kv_cache_config) -> list:
    """[(index in kv_cache_groups, group)] of the KV cache groups the connector stores: those
    vLLM transfers (enable_kv_transfer), each an attention group with one block per position
    (full, sliding-window or chunked-local attention: the hybrid allocator's groups). Refuses,
    naming the group, a model with another kind, or groups of different block sizes."""
    from vllm.v1 import kv_cache_interface

    refused = tuple(getattr(kv_cache_interface, n) for n in _REFUSED_SPECS if hasattr(kv_cache_interface, n))
    ids = getattr(kv_cache_config, "transfer_group_ids", range(len(kv_cache_config.kv_cache_groups)))
    groups = [(i, kv_cache_config.kv_cache_groups[i]) for i in ids]
    if not groups:
        raise NotImplementedError("KvtierConnector: the model has no KV cache group to transfer")
    for i, g in groups:
        spec = g.kv_cache_spec
        if isinstance(spec, refused) or int(getattr(spec, "prefix_replay_tokens", 0) or 0) > 0:
            raise NotImplementedError(
                f"KvtierConnector: KV cache group {i} ({type(spec).__name__}, layers {g.layer_names[:2]}...) "
                "is not kept as one block per position; only full, sliding-window and chunked-local "
                "attention groups are supported")
    sizes = {int(g.kv_cache_spec.block_size) for _, g in groups}
    if len(sizes) > 1:
        raise NotImplementedError(f"KvtierConnector: KV cache groups of different block sizes {sorted(sizes)}")
    return groups


def _layout_description(kv_cache_config, groups: list, cache_config, hash_algo: str, tp_size: int) -> dict:
    """What the namespace's fingerprint covers: every property of the pages a block holds."""
    spec = groups[0][1].kv_cache_spec
    description = {
        "connector": 1,
        "layout": str(getattr(kv_cache_config, "kv_cache_layout", "")),
        "spec": type(spec).__name__,
        "block_size": int(spec.block_size),
        "num_kv_heads": getattr(spec, "num_kv_heads", None),
        "head_size": getattr(spec, "head_size", None),
        "head_size_v": getattr(spec, "head_size_v", None),
        "dtype": str(spec.dtype),
        "page_size_bytes": int(spec.page_size_bytes),
        "layers": natural_layer_order(name for _, g in groups for name in g.layer_names),
        "cache_dtype": str(cache_config.cache_dtype),
        "hash_algo": hash_algo,
        "tp": tp_size,
    }
    if len(groups) > 1:  # one group keeps the fingerprint its blocks were stored under
        description["groups"] = [
            {"spec": type(g.kv_cache_spec).__name__, "layers": natural_layer_order(g.layer_names),
             "sliding_window": getattr(g.kv_cache_spec, "sliding_window", None),
             "attention_chunk_size": getattr(g.kv_cache_spec, "attention_chunk_size", None)}
            for _, g in groups]
    return description


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    """Scheduler -> worker, once per step (pickled across processes)."""

    # (req_id, [(block_id, key16)], asynchronously?) to load: the synchronous ones before
    # this step's forward, the asynchronous ones whenever they are ready
    loads: list = field(default_factory=list)
    # (req_id, parent key16 or None, [(block_id, key16)], tokens per block: 0 for whole
    # blocks, fewer for a tail, pin) to save after it. pin: the scheduler's hold on the blocks
    # (kvtier.vllm.pins), which the workers report once they copied the pages; None: nothing
    # holds them, so they are copied on the step
    saves: list = field(default_factory=list)


@dataclass
class KvtierWorkerMetadata(KVConnectorWorkerMetadata):
    """Workers -> scheduler, once per step: the finished requests whose puts landed since the
    last step, the saves whose pages were copied (their pins), and on how many workers each
    (vLLM aggregates the ranks' metadata with aggregate)."""

    landed: dict = field(default_factory=dict)  # req_id -> workers that reported it
    copied: dict = field(default_factory=dict)  # pin -> workers that reported it

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        assert isinstance(other, KvtierWorkerMetadata)

        def merge(a: dict, b: dict) -> dict:
            merged = dict(a)
            for k, count in b.items():
                merged[k] = merged.get(k, 0) + count
            return merged
        return KvtierWorkerMetadata(landed=merge(self.landed, other.landed), copied=merge(self.copied, other.copied))


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        socket_path = extra.get("socket_path")
        if not socket_path:
            raise ValueError("KvtierConnector: kv_connector_extra_config['socket_path'] is required")
        pc = vllm_config.parallel_config
        if pc.pipeline_parallel_size != 1:
            raise NotImplementedError("KvtierConnector: pipeline parallelism is not supported yet")
        if kv_cache_config is None:
            raise NotImplementedError("KvtierConnector: needs vLLM's KV cache config (vLLM 0.32)")
        self._init_layout(vllm_config, kv_cache_config)
        tp_size = int(pc.tensor_parallel_size)
        self._init_tenants(vllm_config, role, extra, tp_size)
        self._init_options(extra)
        self._connect(role, extra, socket_path)
        self._init_scheduler_side(tp_size)
        self._init_worker_side()

    def _init_layout(self, vllm_config, kv_cache_config) -> None:
        """The transferred KV cache groups and their layers, and the layout's fingerprint."""
        # A row of block ids, one per group, names a block position (layout.block_rows); a
        # kvtier block holds every group's layers at that position.
        self._groups = _transfer_groups(kv_cache_config)
        spec = self._groups[0][1].kv_cache_spec
        cc = vllm_config.cache_config
        self._block_size = int(spec.block_size)
        hash_bs = getattr(kv_cache_config, "hash_block_size", None) or self._block_size
        if hash_bs != self._block_size:
            raise NotImplementedError(f"KvtierConnector: hash_block_size {hash_bs} != block_size {self._block_size}")
        algo = str(getattr(cc, "prefix_caching_hash_algo", "sha256"))
        if algo.startswith("xxhash") and not os.environ.get("PYTHONHASHSEED"):
            logger.warning("KvtierConnector: prefix_caching_hash_algo=%s without PYTHONHASHSEED: block "
                           "hashes are random per process and kvtier will never hit", algo)
        self._layer_group = {name: pos for pos, (_, g) in enumerate(self._groups) for name in g.layer_names}
        self._layer_names = natural_layer_order(self._layer_group)
        self._group_page_bytes = [int(g.kv_cache_spec.page_size_bytes) for _, g in self._groups]
        self._description = _layout_description(kv_cache_config, self._groups, cc, algo,
                                                vllm_config.parallel_config.tensor_parallel_size)
        self._fingerprint = layout_fingerprint(self._description)

    def _init_tenants(self, vllm_config, role: KVConnectorRole, extra: dict, tp_size: int) -> None:
        """The namespace (tenant) of each tensor-parallel rank, and this process's."""
        mc = vllm_config.model_config
        model = extra.get("model") or getattr(mc, "served_model_name", None) or mc.model
        if isinstance(model, (list, tuple)):
            model = model[0]
        base_tenant = str(extra.get("tenant", ""))
        if extra.get("fold_namespace", True):
            base_tenant = namespace_tenant(base_tenant, str(model), self._fingerprint)
        # Tensor parallelism: each rank stores its own heads under its own tenant; MLA's latent
        # cache is the same on every rank, so rank 0 saves the one copy every rank loads.
        replicated = bool(getattr(mc, "use_mla", False))
        self._shard_tenants = shard_tenants(base_tenant, tp_size, replicated)
        self._tp_rank = 0
        if role == KVConnectorRole.WORKER and tp_size > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            self._tp_rank = get_tensor_model_parallel_rank()
        self._tenant = self._shard_tenants[0 if replicated else self._tp_rank]
        self._saves = not replicated or self._tp_rank == 0

    def _init_options(self, extra: dict) -> None:
        """kv_connector_extra_config's options (docs/vllm.md), each checked now rather than at
        the first request that uses it."""
        self._dump_dir = extra.get("debug_dump_dir")
        self._events_path = extra.get("events_path") or (
            os.path.join(self._dump_dir, "events.jsonl") if self._dump_dir else None)
        self._scramble_load = bool(extra.get("debug_scramble_load", False))
        self._fail_loads = bool(extra.get("debug_fail_loads", False))  # tests only: every get fails
        if self._dump_dir:
            os.makedirs(self._dump_dir, exist_ok=True)
        self._async_mode = str(extra.get("async_load", "auto"))
        load_asynchronously(self._async_mode, [], [])  # rejects an unknown mode now, not at the first hit
        if len(self._groups) > 1:
            # vLLM maps failed block ids back to requests only with one group; with several it
            # takes back a failed load only for a request that waits for it (failed_recving).
            if self._async_mode == "never":
                raise ValueError("KvtierConnector: async_load 'never' cannot be used with several KV cache "
                                 "groups: vLLM can recompute a failed load only for a request that waits for it")
            self._async_mode = "always"
        self._use_cost_model = bool(extra.get("use_cost_model", True))
        self._pipeline_layers = bool(extra.get("pipeline_layers", True))
        self._tail_granularity = int(extra.get("partial_block_tokens", DEFAULT_TAIL_GRANULARITY))
        tail_lengths(0, self._block_size, self._tail_granularity)  # rejects a negative granularity now
        self._load_buffer_bytes = int(extra.get("load_buffer_bytes", _DEFAULT_LOAD_BUFFER_BYTES))
        self._save_buffer_bytes = int(extra.get("shared_memory_bytes", _DEFAULT_SHM_BYTES))  # the saver's staging

    def _connect(self, role: KVConnectorRole, extra: dict, socket_path: str) -> None:
        """This process's connection to the daemon; the scheduler's also to every other rank's
        namespace (a chain is looked up in each) and the kinds of the server's tiers (for the
        async decision and vLLM's hit sources)."""
        # The scheduler looks up and the worker's own client only connects: payloads travel on
        # the loader's and the saver's connections, in their own segments.
        shm_bytes = _CONTROL_SHM_BYTES
        self._socket_path = socket_path
        self._auth_token = str(extra.get("auth_token", ""))
        self._client = kvtier.Client.connect_unix(
            socket_path, tenant=self._tenant, auth_token=self._auth_token, shared_memory_bytes=shm_bytes)
        self._shard_clients = [self._client]
        self._tier_kinds: list = []
        if role == KVConnectorRole.SCHEDULER:
            self._tier_kinds = [t.get("kind", "") for t in self._client.stats().get("tiers", [])]
            self._shard_clients += [kvtier.Client.connect_unix(
                socket_path, tenant=t, auth_token=self._auth_token, shared_memory_bytes=shm_bytes)
                for t in self._shard_tenants[1:]]
        logger.info("KvtierConnector(%s): tenant %r, block_size %d, %d KV cache group(s), socket %s", role.name,
                    self._tenant, self._block_size, len(self._groups), socket_path)

    def _init_scheduler_side(self, tp_size: int) -> None:
        self._plans: dict[str, RequestPlan] = {}
        self._requests: dict[str, Any] = {}
        self._async_to_start: set = set()  # allocated, not yet in a step's metadata
        # Requests whose asynchronous load failed (vLLM's failed_recving): vLLM looks them up
        # again to recompute them, and kvtier answers with a miss rather than the same load.
        self._failed_loads: set = set()
        # Waiting requests the server was told about (Client.expect: the predictive policy keeps
        # their blocks), withdrawn once their loads are in a step: req_id -> [(client, expect id)]
        self._expected: dict[str, list] = {}
        self._landing = LandingSaves(_LANDING_WAIT_S, reporters=tp_size)
        self._pins = SavePins(reporters=tp_size)

    def _init_worker_side(self) -> None:
        self._layers: list = []  # (name, uint8 [num_blocks, page_bytes] view, page_bytes, offset, group position)
        # For kvtier.copy_rows, made once (a torch call on a background thread waits for the GIL):
        # each layer's view as numpy, and that layer's page in every slot of the two segments.
        self._layer_rows: list = []
        self._load_columns: list = []
        self._save_columns: list = []
        self._layer_index: dict = {}
        self._block_bytes = 0
        self._load_client = None  # the loader thread's own connection and segment
        self._load_shm = None
        self._load_shm_t = None
        self._loader: Optional[BlockLoader] = None
        self._save_client = None  # the saver thread's own connection and staging segment
        self._save_shm = None
        self._save_shm_t = None
        self._saver: Optional[BlockSaver] = None
        self._save_reqs: set = set()  # requests with saves in a step's metadata, until reported
        self._finishing: set = set()  # of them, finished in vLLM, reported once their puts landed
        self._landed: set = set()  # of those, landed and not yet in a step's worker metadata
        self._copied: list = []  # pins of saves copied (or failed) and not yet in a step's worker metadata
        self._sync_jobs: list = []  # this step's, until the forward is done with them
        self._stall_s = 0.0  # how long this step's forward waited for its loads
        self._load_started: dict = {}  # req_id -> perf_counter at submit
        self._load_errors: set = set()
        self._failed_recving: set = set()  # several groups: requests whose asynchronous load failed
        self._loaded_pages: dict = {}  # debug dumps only: row -> (its pages as loaded, layers left out) (_unpack)
        self.stats = {"lookups": 0, "deferred_lookups": 0, "hit_tokens": 0, "tail_hits": 0, "tail_hit_tokens": 0,
                      "async_loads": 0, "loaded_blocks": 0,
                      "saved_blocks": 0, "load_failed_blocks": 0, "refused_blocks": 0, "skipped_blocks": 0,
                      "failed_puts": 0, "load_wait_s": 0.0, "save_s": 0.0, "save_waits": 0, "save_wait_s": 0.0}

    # ------------------------------------------------------------------ helpers
    def _event(self, **rec) -> None:
        if self._events_path:
            rec.update(pid=os.getpid(), role=self._role.name, t=round(time.time(), 4))
            with open(self._events_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    # ------------------------------------------------------------- worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        names = natural_layer_order(n for n in kv_caches if n in self._layer_group)
        if names != self._layer_names:
            logger.warning("KvtierConnector: registered layers differ from the KV cache groups'")
        layers = []
        offset = 0
        for name in names:
            t = kv_caches[name]
            if t.device.type != "cpu":
                raise NotImplementedError("KvtierConnector: only CPU KV caches in this cut")
            geo = page_geometry(tuple(t.shape), tuple(t.stride()), t.element_size())
            group = self._layer_group[name]
            if geo.page_bytes != self._group_page_bytes[group]:
                logger.warning("KvtierConnector: layer %s page is %d bytes, spec says %d", name,
                               geo.page_bytes, self._group_page_bytes[group])
            # The same memory as [num_blocks, page_bytes] uint8 (the page is contiguous).
            if t.stride(-1) != 1:
                raise NotImplementedError(f"KvtierConnector: layer {name}: last dimension not contiguous")
            raw = t.view(torch.uint8)
            u8 = raw.as_strided((geo.num_blocks, geo.page_bytes), (geo.block_stride_bytes, 1),
                                raw.storage_offset())
            assert u8.data_ptr() == t.data_ptr()
            layers.append((name, u8, geo.page_bytes, offset, group))
            offset += geo.page_bytes
        self._layers = layers
        self._layer_rows = [u8.numpy() for _, u8, *_ in layers]
        self._block_bytes = offset
        self._layer_index = {name: i for i, (name, *_) in enumerate(layers)}
        self._start_loader()
        if self._saves:
            self._start_saver()
        logger.info("KvtierConnector: %d layers, %d bytes per kvtier block, %d-byte save staging, %d-byte load buffer",
                    len(layers), offset, len(self._save_shm) if self._save_shm else 0, self._load_buffer_bytes)
        self._event(event="register", layers=len(layers), block_bytes=offset, tp_rank=self._tp_rank, groups=len(self._groups),
                    shape=list(next(iter(kv_caches.values())).shape) if kv_caches else None)

    def _open_segment(self, buffer_bytes: int, option: str):
        """A connection of its own whose segment holds as many whole blocks as buffer_bytes:
        (client, segment, its uint8 tensor, blocks)."""
        slots = buffer_bytes // self._block_bytes if self._block_bytes else 0
        if slots < 1:
            raise ValueError(f"KvtierConnector: {option} {buffer_bytes} holds no {self._block_bytes}-byte block; "
                             "raise it")
        client = kvtier.Client.connect_unix(self._socket_path, tenant=self._tenant, auth_token=self._auth_token,
                                            shared_memory_bytes=slots * self._block_bytes)
        shm = client.shared_memory
        return client, shm, torch.frombuffer(shm, dtype=torch.uint8), slots

    def _start_loader(self) -> None:
        self._load_client, self._load_shm, self._load_shm_t, slots = self._open_segment(
            self._load_buffer_bytes, "load_buffer_bytes")
        self._load_columns = self._columns(self._load_shm_t, slots)
        self._loader = BlockLoader(self._fetch, self._unpack, len(self._layers), slots, self._pipeline_layers)

    def _start_saver(self) -> None:
        self._save_client, self._save_shm, self._save_shm_t, slots = self._open_segment(
            self._save_buffer_bytes, "shared_memory_bytes")
        self._save_columns = self._columns(self._save_shm_t, slots)
        self._saver = BlockSaver(self._put, slots)

    def _columns(self, segment: torch.Tensor, slots: int) -> list:
        """Per layer, its page in each of a segment's slots: numpy [slots, page_bytes] views."""
        table = segment[:slots * self._block_bytes].view(slots, self._block_bytes).numpy()
        return [table[:, off:off + page] for _, _, page, off, _ in self._layers]

    def _staging(self, first_slot: int, count: int) -> torch.Tensor:
        bb = self._block_bytes
        return self._save_shm_t[first_slot * bb:(first_slot + count) * bb].view(count, bb)

    # The saver's callbacks (kvtier.vllm.saver.Pack on its packer thread or vLLM's, Put on the
    # saver thread).
    def _stage(self, blocks, first_slot: int) -> None:
        self._pack([b for b, _ in blocks], first_slot)
        if self._dump_dir:
            self._dump("save", [k for _, k in blocks], self._staging(first_slot, len(blocks)))

    def _put(self, parent, keys, first_slot: int, tokens: int) -> tuple:
        bb, shm = self._block_bytes, self._save_shm
        r = self._save_client.put(keys, [shm[(first_slot + j) * bb:(first_slot + j + 1) * bb]
                                         for j in range(len(keys))], parent=parent, tokens=tokens or self._block_size)
        return r.new_blocks, r.refused_blocks

    @staticmethod
    def _group_runs(rows, group: int) -> list:
        """contiguous_runs of one group's column of rows, without its null blocks."""
        return contiguous_runs([row[group] for row in rows], skip=NULL_BLOCK_ID)

    def _pack(self, rows, first_slot: int) -> None:
        """Staging slots from first_slot <- the pages of the blocks at rows (no null block: the
        scheduler saves only whole rows, layout.saveable), every layer in one copy_rows call."""
        # (staging slot, block id, count) runs: one list per group, shared by its layers.
        runs = [[(first_slot + i, b, n) for i, b, n in self._group_runs(rows, g)]
                for g in range(len(self._groups))]
        kvtier.copy_rows([(self._save_columns[j], self._layer_rows[j], runs[group])
                          for j, (*_, group) in enumerate(self._layers)])

    # The loader thread's callbacks (kvtier.vllm.loader.Fetch and Unpack).
    def _fetch(self, keys, first_slot: int) -> int:
        if self._fail_loads:
            return 0
        bb, shm = self._block_bytes, self._load_shm
        outs = [shm[(first_slot + j) * bb:(first_slot + j + 1) * bb] for j in range(len(keys))]
        try:
            sizes = self._load_client.get(keys, outs)
        except kvtier.KvtierError as e:
            logger.warning("KvtierConnector: get of %d blocks failed: %s", len(keys), e)
            return 0
        good = 0
        while good < len(sizes) and sizes[good] == bb:
            good += 1
        return good

    def _unpack(self, layer: Optional[int], rows, first_slot: int) -> None:
        """Copies buffer slots into the blocks at rows, in one copy_rows call; a group's null
        block (a position its sliding window has passed) takes nothing."""
        if self._scramble_load and len(rows) > 1:
            # Negative control for tests only: each block gets its neighbour's pages.
            rows = rows[-1:] + rows[:-1]
        which = range(len(self._layers)) if layer is None else [layer]
        groups = [self._layers[j][-1] for j in which]
        # (block id, buffer slot, count) runs: one list per group, shared by its layers; a
        # pipelined step unpacks one layer a call, so only that layer's group's are made.
        runs = {g: [(b, first_slot + i, n) for i, b, n in self._group_runs(rows, g)] for g in set(groups)}
        kvtier.copy_rows([(self._layer_rows[j], self._load_columns[j], runs[g]) for j, g in zip(which, groups)])
        if self._dump_dir:
            self._snapshot_loaded(which, rows)

    def _snapshot_loaded(self, which, rows) -> None:
        for _, u8, page, off, group in (self._layers[j] for j in which):
            # The pages as the load left them: the forward may compute over part of a
            # loaded block (a tail's, or the last token of a prompt) once the gate opens.
            # A null block's layers stay out, named in the dump's .skipped list.
            for row in rows:
                snap, skipped = self._loaded_pages.setdefault(
                    row, (torch.zeros(self._block_bytes, dtype=torch.uint8), []))
                if row[group] == NULL_BLOCK_ID:
                    skipped.append([off, page])
                else:
                    snap[off:off + page].copy_(u8[row[group]])

    def _dump(self, prefix: str, keys, rows: torch.Tensor, skipped=None) -> None:
        for j, k in enumerate(keys):
            rank = f".r{self._tp_rank}" if self._tp_rank else ""
            path = os.path.join(self._dump_dir, f"{prefix}-{k.hex()}{rank}")
            with open(path + ".bin", "wb") as f:
                f.write(rows[j].numpy().tobytes())
            if skipped and skipped[j]:
                with open(path + ".skipped", "w") as f:  # [offset, bytes] of the layers not loaded
                    json.dump(skipped[j], f)

    def _loaded(self, job: LoadJob, seconds: float, stall: Optional[float] = None) -> None:
        """Accounts for a finished load job; its failed blocks go to vLLM as load errors (by
        block id with one KV cache group, by request with several)."""
        failed = set(job.failed)
        good = [(b, k) for b, k in job.blocks if b not in failed]
        self.stats["loaded_blocks"] += len(good)
        self.stats["load_failed_blocks"] += len(failed)
        if failed:
            if len(self._groups) == 1:
                self._load_errors.update(row_block_ids(failed))
            else:  # vLLM cannot map block ids of several groups back to requests
                self._failed_recving.add(job.req_id)
            logger.warning("KvtierConnector: %s: %d of %d blocks could not be loaded; vLLM recomputes them",
                           job.req_id, len(failed), len(job.blocks))
        if self._dump_dir:
            snaps = [self._loaded_pages.pop(b, None) for b, _ in job.blocks]
            kept = [(k, snap) for (b, k), snap in zip(job.blocks, snaps) if b not in failed and snap is not None]
            if kept:
                self._dump("load", [k for k, _ in kept], torch.stack([snap for _, (snap, _) in kept]),
                           [skipped for _, (_, skipped) in kept])
        self._event(event="load", req_id=job.req_id, blocks=len(job.blocks), failed=len(failed),
                    asynchronous=job.is_async, seconds=round(seconds, 4), copy_seconds=round(job.copy_seconds, 4),
                    **({} if stall is None else {"forward_waited_seconds": round(stall, 4)}))

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if not self.has_connector_metadata() or self._loader is None:
            return
        meta = self._get_connector_metadata()
        if not meta.loads:
            return
        now = time.perf_counter()
        sync_jobs, async_jobs = [], []
        for req_id, blocks, is_async in meta.loads:
            (async_jobs if is_async else sync_jobs).append(LoadJob(req_id, list(blocks), is_async))
            self._load_started[req_id] = now
        self._sync_jobs = sync_jobs
        self._loader.submit(sync_jobs, async_jobs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._loader is not None and self._sync_jobs:
            t0 = time.perf_counter()
            self._loader.wait_layer(self._layer_index.get(layer_name, -1))
            self._stall_s += time.perf_counter() - t0

    def _finish_sync_loads(self) -> None:
        """Waits for this step's synchronous loads (every layer's gate opened already if the
        forward ran) and accounts for them."""
        if self._loader is None or not self._sync_jobs:
            return
        t0 = time.perf_counter()
        self._loader.wait_step()
        stall = self._stall_s + time.perf_counter() - t0
        self.stats["load_wait_s"] += stall
        for job in self._sync_jobs:
            self._loaded(job, time.perf_counter() - self._load_started.pop(job.req_id, t0), stall)
        self._sync_jobs = []
        self._stall_s = 0.0

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        return  # the pages are copied from the registered tensors in wait_for_save

    def wait_for_save(self):
        """Hands the blocks this step completed to the saver. Their pages are copied after the
        step, on the saver's packer thread, where the scheduler holds the blocks (a pin);
        otherwise here, into the saver's staging, returning once copied (or, when the staging
        is full, once a queued put freed room: back-pressure, counted in save_waits)."""
        self._finish_sync_loads()  # the forward has run; the pages saved below may be among them
        self._account_saves()
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        # Every rank reports the finished requests that saved and the saves it copied (the
        # scheduler counts the ranks), the ranks that do not save at once.
        self._save_reqs.update(req_id for req_id, _, _, _, _ in meta.saves)
        if not self._saves or self._saver is None:
            self._copied += [pin for _, _, _, _, pin in meta.saves if pin is not None]
            return
        t0 = time.perf_counter()
        for req_id, parent, blocks, tokens, pin in meta.saves:
            job = SaveJob(req_id, parent, list(blocks), tokens, pin=pin)
            self._saver.submit(job, self._stage, deferred=pin is not None)
        self.stats["save_s"] += time.perf_counter() - t0

    def _account_saves(self) -> None:
        """Counts and logs the saves the saver finished since the last call (vLLM's thread)."""
        if self._saver is None:
            return
        for job in self._saver.take_finished():
            if job.pin is not None:
                self._copied.append(job.pin)
            self.stats["saved_blocks"] += job.saved
            self.stats["refused_blocks"] += job.refused
            self.stats["skipped_blocks"] += job.skipped
            self.stats["failed_puts"] += job.failed_puts
            self._event(event="save", req_id=job.req_id, blocks=len(job.blocks), new=job.saved,
                        refused=job.refused, skipped=job.skipped, seconds=round(job.seconds, 4),
                        step_seconds=round(job.step_seconds, 4), after_step=job.pin is not None)
        st = self._saver.stats_snapshot()
        self.stats["save_waits"], self.stats["save_wait_s"] = st["waits"], st["wait_s"]

    def get_finished(self, finished_req_ids: set[str]):
        self._account_saves()
        self._finishing.update(r for r in finished_req_ids if r in self._save_reqs)
        sent = {r for r in self._finishing if self._saver is None or not self._saver.pending(r)}
        self._finishing -= sent
        self._save_reqs -= sent
        self._landed |= sent  # reported in build_connector_worker_meta, not as finished_sending
        if self._loader is None:
            return None, None
        done = set()
        now = time.perf_counter()
        for job in self._loader.take_finished():
            self.stats["async_loads"] += 1
            self._loaded(job, now - self._load_started.pop(job.req_id, now))
            done.add(job.req_id)
        return None, (done or None)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        sending, recving = self.get_finished(finished_req_ids)
        failed, self._failed_recving = self._failed_recving, set()
        # A failed receive is a finished one too: vLLM releases the request, then recomputes it.
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()) | failed, failed_recving=failed)

    def build_connector_worker_meta(self) -> Optional[KvtierWorkerMetadata]:
        self._account_saves()
        if not self._landed and not self._copied:
            return None
        meta = KvtierWorkerMetadata(landed=dict.fromkeys(self._landed, 1), copied=dict.fromkeys(self._copied, 1))
        self._landed, self._copied = set(), []
        return meta

    def get_block_ids_with_load_errors(self) -> set[int]:
        self._finish_sync_loads()
        bad, self._load_errors = self._load_errors, set()
        return bad

    def shutdown(self):
        if self._loader is not None:
            self._loader.close()
            self._loader = None
        if self._saver is not None:
            self._saver.close()  # flushes the queued puts (docs/vllm.md "Saves")
            self._account_saves()
            self._saver = None
        if self._role == KVConnectorRole.WORKER:
            self._event(event="worker_stats", **{k: (round(v, 4) if isinstance(v, float) else v)
                                                  for k, v in self.stats.items()})
        self._load_shm_t = self._load_shm = self._save_shm_t = self._save_shm = None
        for client in self._shard_clients + [self._load_client, self._save_client]:
            try:
                if client is not None:
                    client.close()
            except Exception:  # pragma: no cover
                pass

    # ---------------------------------------------------------- scheduler side
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        if request.request_id in self._failed_loads:
            self._event(event="lookup", req_id=request.request_id, num_tokens=request.num_tokens,
                        local_tokens=num_computed_tokens, matched_tokens=0, after_failed_load=True)
            return 0, False
        bs = self._block_size
        hashes = request.block_hashes
        local = num_computed_tokens // bs
        stored = worth = 0
        tiers: list = []
        chain = [bytes(h) for h in hashes]
        if chain:
            try:
                stored, worth, tiers = combine_shard_lookups(
                    [c.lookup([chain])[0] for c in self._shard_clients])
            except kvtier.KvtierError as e:
                logger.warning("KvtierConnector: lookup failed (treated as a miss): %s", e)
        if stored < len(chain) and self._landing.is_landing(block_key(chain[stored])):
            # The next block is in a finished request's save that has not landed yet: ask
            # again next step rather than compute what is about to be stored.
            self.stats["deferred_lookups"] += 1
            self._event(event="lookup_deferred", req_id=request.request_id, stored_blocks=stored)
            return None, False
        # The server's cost model may find recomputing a block cheaper than loading it.
        usable = min(stored, worth) if self._use_cost_model else stored
        ext, ext_tokens = matched_tokens(len(hashes), request.num_tokens, bs, local, usable)
        tail, landing = self._find_tail(request, local + ext, stored) if chain else (None, False)
        if landing:
            self.stats["deferred_lookups"] += 1
            self._event(event="lookup_deferred", req_id=request.request_id, stored_blocks=stored, tail=True)
            return None, False
        if tail is not None:
            ext_tokens = ext * bs + tail[2]
        load_tiers = tiers[local:local + ext] + ([tail[1]] if tail is not None else [])
        is_async = load_asynchronously(self._async_mode, load_tiers, self._tier_kinds)
        plan = self._plans.get(request.request_id)
        if plan is None:
            plan = self._plans[request.request_id] = RequestPlan(request.request_id, bs)
        plan.on_lookup(local, stored, ext, tiers, is_async, tail)
        if is_async:
            # The server starts promoting the blocks now; the worker's get follows a step later.
            try:
                for c in self._shard_clients:
                    if ext:
                        c.prefetch(chain[local:local + ext])
                    if tail is not None:
                        c.prefetch([tail[0]])
            except kvtier.KvtierError as e:
                logger.warning("KvtierConnector: prefetch failed (the load still runs): %s", e)
        self._requests[request.request_id] = request
        if chain and request.request_id not in self._expected:
            self._expect(request.request_id, chain)
        self.stats["lookups"] += 1
        self.stats["hit_tokens"] += ext_tokens
        if tail is not None:
            self.stats["tail_hits"] += 1
            self.stats["tail_hit_tokens"] += tail[2]
        self._event(event="lookup", req_id=request.request_id, num_tokens=request.num_tokens,
                    num_hashes=len(hashes), local_tokens=num_computed_tokens, stored_blocks=stored,
                    worth_loading=worth, matched_tokens=ext_tokens, tail_tokens=tail[2] if tail else 0,
                    asynchronous=is_async)
        return ext_tokens, is_async

    def _tails_allowed(self, request) -> bool:
        """Tails are keyed by token ids alone past their parent block: not for requests whose
        tokens do not say everything about their KV (multimodal placeholders, prompt embeddings)."""
        return (self._tail_granularity > 0 and not getattr(request, "mm_features", None)
                and getattr(request, "prompt_embeds", None) is None)

    def _find_tail(self, request, first: int, stored: int) -> tuple:
        """((key, fastest tier, tokens) of the longest stored tail of block `first` (the first
        block vLLM would compute) that the request's tokens continue, or None; whether a
        candidate is still landing, to defer the lookup as for whole blocks). Only where kvtier
        holds no whole block `first` (`stored` blocks from 0) and one follows a stored or
        computed block; one more round trip, for the candidate lengths together."""
        bs = self._block_size
        start = first * bs
        usable = request.num_tokens - 1 - start  # vLLM computes at least the last token
        if first < 1 or stored > first or usable < 1 or first > len(request.block_hashes) \
                or not self._tails_allowed(request):
            return None, False
        tokens = request.all_token_ids[start:start + bs - 1]
        lengths = tail_lengths(len(tokens), bs, self._tail_granularity)
        if not lengths:
            return None, False
        try:
            keys = tail_keys(bytes(request.block_hashes[first - 1]), tokens, lengths)
        except ValueError as e:
            logger.warning("KvtierConnector: no tail lookup: %s", e)
            return None, False
        if any(self._landing.is_landing(k) for k in keys):
            return None, True
        try:
            found = [c.lookup([[k] for k in keys]) for c in self._shard_clients]
        except kvtier.KvtierError as e:
            logger.warning("KvtierConnector: tail lookup failed (treated as a miss): %s", e)
            return None, False
        i = longest_tail(found, self._use_cost_model)
        if i < 0:
            return None, False
        _, _, tiers = combine_shard_lookups([r[i] for r in found])
        return (keys[i], tiers[0], min(lengths[i], usable)), False

    def update_connector_output(self, connector_output) -> None:
        self._failed_loads.update(getattr(connector_output, "failed_recving", None) or ())
        meta = connector_output.kv_connector_worker_meta
        if isinstance(meta, KvtierWorkerMetadata):
            self._landing.landed(meta.landed)
            self._pins.copied(meta.copied)
            self._event(event="landed", reports=meta.landed)
            if meta.copied:
                self._event(event="copied", reports=meta.copied, held_blocks=self._pins.held_blocks())

    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        # Saves hold their blocks here while the workers copy them after the step (pins.py).
        self._pins.bind(gpu_block_pool)

    def has_pending_push_work(self) -> bool:
        # The workers' reports that free pinned blocks arrive only with a step.
        return self._pins.pending()

    def has_pending_block_frees(self) -> bool:
        # Blocks come back when the saves' copies finish: wait for them rather than preempt.
        return self._pins.pending()

    def _expect(self, req_id: str, chain) -> None:
        """Tells the server that a waiting request will read `chain` (vLLM's waiting queue is
        the cache's known future); a hint, so a failure only costs the protection."""
        told = []
        try:
            for c in self._shard_clients:
                told.append((c, c.expect(chain)))
        except kvtier.KvtierError as e:
            logger.warning("KvtierConnector: expect failed (its blocks are not protected): %s", e)
        self._expected[req_id] = told

    def _withdraw_expectation(self, req_id: str) -> None:
        for c, expect_id in self._expected.pop(req_id, []):
            try:
                c.unexpect(expect_id)
            except kvtier.KvtierError as e:
                logger.warning("KvtierConnector: unexpect failed: %s", e)

    def get_external_cache_hit_sources(self, request, num_external_tokens: int):
        from vllm.v1.metrics.cache_hit_source import CacheHitSource

        plan = self._plans.get(request.request_id)
        if not num_external_tokens or plan is None:
            return {}
        return {CacheHitSource(src): n for src, n in hit_sources(
            plan.ext_tiers(), self._tier_kinds, self._block_size, num_external_tokens).items()}

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        plan = self._plans.get(request.request_id)
        if plan is None:
            plan = self._plans[request.request_id] = RequestPlan(request.request_id, self._block_size)
            self._requests[request.request_id] = request
        plan.on_alloc(self._rows(blocks.get_block_ids()), num_external_tokens)
        if plan.load_async and plan.load_pending:
            self._async_to_start.add(request.request_id)

    def _rows(self, group_block_ids) -> list:
        """The transferred groups' block tables of a request as rows (layout.block_rows)."""
        return block_rows([group_block_ids[i] for i, _ in self._groups])

    def build_connector_meta(self, scheduler_output) -> KvtierConnectorMetadata:
        so = scheduler_output
        meta = KvtierConnectorMetadata()

        def plan_step(req_id: str, computed: int) -> None:
            self._withdraw_expectation(req_id)  # scheduled: its loads are in this step
            plan, req = self._plans.get(req_id), self._requests.get(req_id)
            if plan is None or req is None:
                return
            loads = plan.take_load(req.block_hashes)
            if loads:
                meta.loads.append((req_id, loads, False))
            after = computed + so.num_scheduled_tokens.get(req_id, 0)
            parent, saves = saveable(*plan.take_save(req.block_hashes, after))
            if saves:
                meta.saves.append((req_id, parent, saves, 0, self._pins.pin(row_block_ids(r for r, _ in saves))))
                self._landing.sent(req_id, (k for _, k in saves))
            if self._tails_allowed(req):
                try:
                    tail = plan.take_tail_save(req.block_hashes, req.all_token_ids, req.num_prompt_tokens, after,
                                               self._tail_granularity)
                except ValueError as e:  # a token id that is not a uint32: no tail, the step goes on
                    logger.warning("KvtierConnector: %s: no tail saved: %s", req_id, e)
                    tail = None
                if tail is not None:
                    parent, blocks, tokens = tail
                    parent, blocks = saveable(parent, blocks)
                    if blocks:
                        meta.saves.append((req_id, parent, blocks, tokens, self._pins.pin(row_block_ids(r for r, _ in blocks))))
                        self._landing.sent(req_id, (k for _, k in blocks))

        # Requests vLLM parked in WAITING_FOR_REMOTE_KVS: they are not scheduled this step.
        for req_id in sorted(self._async_to_start):
            self._withdraw_expectation(req_id)
            plan, req = self._plans.get(req_id), self._requests.get(req_id)
            if plan is not None and req is not None:
                loads = plan.take_load(req.block_hashes)
                if loads:
                    meta.loads.append((req_id, loads, True))
        self._async_to_start.clear()
        for nr in so.scheduled_new_reqs:
            plan = self._plans.get(nr.req_id)
            if plan is not None:
                plan.set_blocks(self._rows(nr.block_ids))
            plan_step(nr.req_id, nr.num_computed_tokens)
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            plan = self._plans.get(req_id)
            nb = cached.new_block_ids[i]
            if plan is not None:
                if req_id in cached.resumed_req_ids:
                    plan.set_blocks(self._rows(nb) if nb is not None else [])
                elif nb is not None:
                    plan.append_blocks(self._rows(nb))
            plan_step(req_id, cached.num_computed_tokens[i])
        return meta

    def request_finished_all_groups(self, request, block_ids: tuple) -> tuple:
        return self.request_finished(request, [])  # the blocks are not read: saves hold their own (pins)

    def request_finished(self, request, block_ids):
        self._withdraw_expectation(request.request_id)
        self._async_to_start.discard(request.request_id)
        self._failed_loads.discard(request.request_id)
        self._plans.pop(request.request_id, None)
        self._requests.pop(request.request_id, None)
        # vLLM frees its blocks now: those a save still reads are pinned until copied
        # (pins.py), the rest go back at once (holding them all until the puts land starved the
        # next prompt of blocks); its keys are landing until the workers report them
        # (update_connector_output).
        self._landing.finished(request.request_id)
        return False, None
