"""kvtier as an SGLang HiCache L3 storage backend (docs/sglang.md).

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang.storage", "class_name": "KvtierStorage",
        "interface_v1": 1, "socket_path": "/run/kvtier/kvtier.sock"}'

Pages go through ``kvtier serve`` (kvtier.Client over its Unix socket) and the
shared-memory segment: the v1 zero-copy path copies each page's spans
(``mem_pool_host.get_page_buffer_meta``) into the segment with one kvtier.copy_rows
call a page (the GIL released once, not once per span: HiCache calls this from its
own threads while the scheduler's runs Python; docs/sglang.md), and the server copies
once more into its tiers. Every page is a one-block kvtier
chain without parent (SGLang's API is flat); keys: kvtier.sglang.keys.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, List, Optional

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

import kvtier
from kvtier.sglang.keys import (
    leading_hits,
    namespace_tenant,
    page_fingerprint,
    page_spans,
    shard_name,
    storage_key,
    storage_keys,
    truthy,
)

logger = logging.getLogger(__name__)

_ONE_ROW = ((0, 0, 1),)  # a copy_rows run: row 0 of one buffer to row 0 of the other

_DEFAULT_SHM_BYTES = 256 << 20


class KvtierStorage(HiCacheStorage):
    """SGLang ``HiCacheStorage`` backed by a ``kvtier serve`` daemon.

    extra_config keys: ``socket_path`` (required), ``tenant`` (""), ``auth_token``,
    ``shared_memory_bytes`` (256 MiB), ``io_timeout_ms`` (30000), ``model``
    (default: storage_config.model_name), ``fold_namespace`` (true),
    ``interface_v1`` (SGLang's own switch to the zero-copy methods).
    """

    def __init__(self, storage_config: Optional[HiCacheStorageConfig] = None, kwargs: Optional[dict] = None):
        self.storage_config = storage_config
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        extra.update(kwargs or {})
        self.socket_path = extra.get("socket_path")
        if not self.socket_path:
            raise ValueError("kvtier storage backend: extra_config needs 'socket_path' (of `kvtier serve`)")
        self._tenant = str(extra.get("tenant", ""))
        self._auth_token = str(extra.get("auth_token", ""))
        self._shm_bytes = int(extra.get("shared_memory_bytes", _DEFAULT_SHM_BYTES))
        self._io_timeout_ms = int(extra.get("io_timeout_ms", 30000))
        self._fold = truthy(extra.get("fold_namespace", True))
        self._v1 = truthy(extra.get("interface_v1", 0))
        self._model = extra.get("model") or getattr(storage_config, "model_name", None) or ""
        c = storage_config
        self._shard = shard_name(
            tp_rank=getattr(c, "tp_rank", 0), tp_size=getattr(c, "tp_size", 1),
            pp_rank=getattr(c, "pp_rank", 0), pp_size=getattr(c, "pp_size", 1),
            attn_cp_rank=getattr(c, "attn_cp_rank", 0), attn_cp_size=getattr(c, "attn_cp_size", 1),
            is_mla_model=bool(getattr(c, "is_mla_model", False)),
            dcp_rank=getattr(c, "dcp_rank", 0), dcp_size=getattr(c, "dcp_size", 1),
        )
        self.is_writer = bool(getattr(c, "is_storage_writer", True)) if c is not None else True
        self.mem_pool_host = None
        self._fingerprint = page_fingerprint({"pool": "none"})
        self._epoch = 0
        self._lock = threading.Lock()  # one client and one segment: one transfer at a time
        self._client = None
        self._shm = None
        self._shm_row = None  # the segment as one numpy row, for copy_rows

    # --- connection ---------------------------------------------------------------
    @property
    def tenant(self) -> str:
        if not self._fold:
            return self._tenant
        return namespace_tenant(self._tenant, self._model, self._shard, self._fingerprint, self._epoch)

    def _connect(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = kvtier.Client.connect_unix(
            self.socket_path, tenant=self.tenant, auth_token=self._auth_token,
            shared_memory_bytes=self._shm_bytes, io_timeout_ms=self._io_timeout_ms)
        self._shm = self._client.shared_memory
        self._shm_row = np.frombuffer(self._shm, dtype=np.uint8).reshape(1, -1)

    def _ensure(self):
        if self._client is None:
            self._connect()
        return self._client

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        p = mem_pool_host
        fields = {
            "pool": type(p).__name__, "layout": getattr(p, "layout", ""), "dtype": str(getattr(p, "dtype", "")),
            "page_size": getattr(p, "page_size", 0), "io": "v1" if self._v1 else "flat",
        }
        try:  # span sizes of one page: the payload format of the v1 path
            _, sizes = p.get_page_buffer_meta(torch.arange(p.page_size, dtype=torch.int64))
            fields["spans"] = ",".join(str(s) for s in sizes)
        except Exception:  # noqa: BLE001 -- pools without zero-copy meta
            fields["flat_numel"] = int(p.get_dummy_flat_data_page().numel())
        self._fingerprint = page_fingerprint(fields)
        with self._lock:
            self._connect()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # --- one-page primitives (caller holds the lock) ---------------------------------
    def _put_page(self, key: bytes, nbytes: int) -> bool:
        r = self._client.put([key], [self._shm[0:nbytes]], parent=None, tokens=self._tokens_per_page())
        return r.refused_blocks == 0

    def _get_page(self, key: bytes, nbytes: int) -> Optional[int]:
        sizes = self._client.get([key], [self._shm[0:nbytes]])
        return sizes[0] if sizes else None

    def _tokens_per_page(self) -> int:
        return int(getattr(self.mem_pool_host, "page_size", 0) or 16)

    def _fits(self, nbytes: int) -> bool:
        if nbytes > self._shm_bytes:
            logger.error("kvtier: a page of %d bytes exceeds shared_memory_bytes=%d", nbytes, self._shm_bytes)
            return False
        return True

    # --- zero-copy v1 ---------------------------------------------------------------
    def _page_meta(self, host_indices: torch.Tensor, n: int):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        return page_spans(ptrs, sizes, n)

    def _span_copies(self, spans, into_segment: bool) -> list:
        """copy_rows items between a page's spans (addresses in SGLang's host pool) and the
        segment, which holds the page as its spans one after another."""
        items, off = [], 0
        for ptr, size in spans:
            span = np.frombuffer((ctypes.c_char * size).from_address(ptr), dtype=np.uint8).reshape(1, size)
            part = self._shm_row[:, off:off + size]
            items.append((part, span, _ONE_ROW) if into_segment else (span, part, _ONE_ROW))
            off += size
        return items

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info=None) -> List[bool]:
        if not keys:
            return []
        if not self.is_writer:  # an MLA replica: rank 0 of the DCP group writes
            return [True] * len(keys)
        pages = self._page_meta(host_indices, len(keys))
        out = []
        with self._lock:
            self._ensure()
            for k, spans in zip(storage_keys(keys), pages):
                nbytes = sum(s for _, s in spans)
                if not self._fits(nbytes):
                    out.append(False)
                    continue
                kvtier.copy_rows(self._span_copies(spans, into_segment=True))
                try:
                    out.append(self._put_page(k, nbytes))
                except kvtier.KvtierError as e:
                    logger.error("kvtier put failed: %s", e)
                    out.append(False)
        return out

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info=None) -> List[bool]:
        if not keys:
            return []
        pages = self._page_meta(host_indices, len(keys))
        out = [False] * len(keys)
        with self._lock:
            self._ensure()
            # One get a page: a get reads a chain's stored prefix, and every page is a chain of
            # its own (SGLang's API is flat).
            for i, (k, spans) in enumerate(zip(storage_keys(keys), pages)):
                nbytes = sum(s for _, s in spans)
                if not self._fits(nbytes):
                    break
                try:
                    size = self._get_page(k, nbytes)
                except kvtier.KvtierError as e:
                    logger.warning("kvtier get failed: %s", e)
                    break
                if size != nbytes:  # missing, or stored under another layout
                    break
                kvtier.copy_rows(self._span_copies(spans, into_segment=False))
                out[i] = True
        return out

    # --- exists ---------------------------------------------------------------------
    def batch_exists(self, keys: List[str], extra_info=None) -> int:
        if not keys:
            return 0
        with self._lock:
            res = self._ensure().lookup([[k] for k in storage_keys(keys)])
        return leading_hits([r[0] == 1 for r in res])

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # --- generic (copying) API: flat data pages as torch tensors ---------------------
    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None):
        if target_location is None:
            if self.mem_pool_host is None:
                raise ValueError("kvtier get: target_location is needed before register_mem_pool_host")
            target_location = self.mem_pool_host.get_dummy_flat_data_page()
        dst = target_location.view(torch.uint8).reshape(-1)
        nbytes = dst.numel()
        if not self._fits(nbytes):
            return None
        with self._lock:
            self._ensure()
            try:
                size = self._get_page(storage_key(key), nbytes)
            except kvtier.KvtierError as e:
                logger.warning("kvtier get failed: %s", e)
                return None
            if size != nbytes:
                return None
            src = torch.frombuffer(self._shm, dtype=torch.uint8, count=nbytes)
            dst.copy_(src)
        return target_location

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None):
        locs = target_locations or [None] * len(keys)
        out = []
        for k, loc in zip(keys, locs):
            r = self.get(k, loc)
            out.append(r)
            if r is None:  # SGLang uses the leading run only
                out.extend([None] * (len(keys) - len(out)))
                break
        return out

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        if value is None:
            return False
        if not self.is_writer:
            return True
        src = value.contiguous().view(torch.uint8).reshape(-1)
        nbytes = src.numel()
        if not self._fits(nbytes):
            return False
        with self._lock:
            self._ensure()
            torch.frombuffer(self._shm, dtype=torch.uint8, count=nbytes).copy_(src)
            try:
                return self._put_page(storage_key(key), nbytes)
            except kvtier.KvtierError as e:
                logger.error("kvtier put failed: %s", e)
                return False

    def batch_set(self, keys: List[str], values: Optional[Any] = None, target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        return all(self.set(k, v) for k, v in zip(keys, values or []))

    # --- admin ----------------------------------------------------------------------
    def clear(self) -> bool:
        """kvtier has no delete: move to a fresh namespace (epoch + 1); old pages age out."""
        with self._lock:
            self._epoch += 1
            self._connect()
        return True

    def get_stats(self):
        with self._lock:
            return self._ensure().stats()
