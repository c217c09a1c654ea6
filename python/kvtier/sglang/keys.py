"""Pure helpers of kvtier's SGLang HiCache storage backend (docs/sglang.md).

No SGLang, torch or kvtier extension import: tested under plain python3
(python/tests/test_sglang_storage.py).

SGLang's storage API is flat: every page is an independent key (a hex string, the
page's chained hash; or a derived string such as ``<hash>.mamba`` or the unified
scheme's ``<hash>_<digest>_L0-31``). kvtier keys are 16 bytes and chained, so
each page is stored as a one-block chain with no parent, and ``batch_exists``
asks kvtier one one-key chain per page.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

KEY_BYTES = 16
_HEX = re.compile(r"[0-9a-fA-F]+")


def storage_key(key: str) -> bytes:
    """The 16-byte kvtier key of an SGLang page key.

    A hex digest of at least 32 digits (SGLang's page hash is a SHA-256 hex
    digest) maps to its first 16 bytes, as kvtier does with a 32-byte digest;
    any other string maps to the first 16 bytes of SHA-256 of its UTF-8 bytes.
    """
    if not isinstance(key, str):
        raise TypeError(f"SGLang storage keys are str, got {type(key).__name__}")
    if len(key) >= 2 * KEY_BYTES and len(key) % 2 == 0 and _HEX.fullmatch(key):
        return bytes.fromhex(key[: 2 * KEY_BYTES])
    return hashlib.sha256(key.encode("utf-8")).digest()[:KEY_BYTES]


def storage_keys(keys: Iterable[str]) -> List[bytes]:
    return [storage_key(k) for k in keys]


def shard_name(
    *,
    tp_rank: int = 0,
    tp_size: int = 1,
    pp_rank: int = 0,
    pp_size: int = 1,
    attn_cp_rank: int = 0,
    attn_cp_size: int = 1,
    is_mla_model: bool = False,
    dcp_rank: int = 0,
    dcp_size: int = 1,
) -> str:
    """Which slice of a page this rank holds (HiCacheFile's key suffix, as a name).

    MHA KV is sharded over TP ranks (each rank's page bytes differ): the TP rank is
    part of the name. MLA KV is replicated over TP: all ranks share one name.
    """
    parts = ["mla"] if is_mla_model else [f"tp{tp_rank}of{tp_size}"]
    if pp_size > 1:
        parts.append(f"pp{pp_rank}of{pp_size}")
    if attn_cp_size > 1:
        parts.append(f"cp{attn_cp_rank}of{attn_cp_size}")
    if dcp_size > 1:
        parts.append(f"dcp{dcp_rank}of{dcp_size}")
    return "-".join(parts)


def page_fingerprint(fields: Mapping[str, object]) -> str:
    """A short stable digest of what a stored page's bytes mean (pool class, layout,
    dtype, page size, span sizes, payload format)."""
    text = ";".join(f"{k}={fields[k]}" for k in sorted(fields))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def namespace_tenant(
    tenant: str, model: Optional[str], shard: str, fingerprint: str, epoch: int = 0
) -> str:
    """The kvtier tenant the pages live under: tenant/sglang/model/shard/fingerprint[/eN].

    kvtier isolates tenants, so pages of another model, rank slice or layout miss.
    ``epoch`` is bumped by ``clear()`` (kvtier has no delete: clearing moves to a
    fresh namespace and the old pages age out).
    """
    name = f"{tenant}/sglang/{model or ''}/{shard}/{fingerprint}"
    return name if epoch == 0 else f"{name}/e{epoch}"


def leading_hits(flags: Sequence[bool]) -> int:
    """The number of consecutive True from the start (batch_exists' contract)."""
    for i, f in enumerate(flags):
        if not f:
            return i
    return len(flags)


def page_spans(ptrs: Sequence[int], sizes: Sequence[int], num_pages: int) -> List[List[Tuple[int, int]]]:
    """Split get_page_buffer_meta's flat (ptr, size) lists into one list per page.

    Every page has the same number of spans (2 for page_first MHA: K and V; 2 per
    layer for layer_first; 1 for MLA); the stored payload is the spans concatenated.
    """
    if len(ptrs) != len(sizes):
        raise ValueError(f"{len(ptrs)} pointers but {len(sizes)} sizes")
    if num_pages <= 0:
        return []
    if len(ptrs) % num_pages:
        raise ValueError(f"{len(ptrs)} spans do not split into {num_pages} pages")
    per = len(ptrs) // num_pages
    return [list(zip(ptrs[i * per:(i + 1) * per], sizes[i * per:(i + 1) * per])) for i in range(num_pages)]


def truthy(value: object) -> bool:
    """extra_config flags arrive as bool, int or str ("1", "true")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
