"""kvtier's SGLang HiCache storage backend (docs/sglang.md).

Load it through SGLang's dynamic storage backend::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang.storage", "class_name": "KvtierStorage",
        "interface_v1": 1, "socket_path": "/run/kvtier/kvtier.sock"}'

Importing this package does not import SGLang or torch: the pure helpers live in
:mod:`kvtier.sglang.keys`, and ``KvtierStorage`` is loaded on first access.
"""

from kvtier.sglang.keys import (  # noqa: F401
    leading_hits,
    namespace_tenant,
    page_fingerprint,
    page_spans,
    shard_name,
    storage_key,
    storage_keys,
)

__all__ = [
    "KvtierStorage",
    "leading_hits",
    "namespace_tenant",
    "page_fingerprint",
    "page_spans",
    "shard_name",
    "storage_key",
    "storage_keys",
]


def __getattr__(name):
    if name == "KvtierStorage":
        from kvtier.sglang.storage import KvtierStorage

        return KvtierStorage
    raise AttributeError(name)
