"""kvtier's vLLM v1 KV connector (docs/vllm.md).

Use it through vLLM's out-of-tree connector loading::

    kv_transfer_config={
        "kv_connector": "KvtierConnector",
        "kv_connector_module_path": "kvtier.vllm.connector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"socket_path": "/run/kvtier/kvtier.sock"},
    }

Importing this package does not import vLLM or torch: the pure helpers live in
:mod:`kvtier.vllm.layout`, and ``KvtierConnector`` is loaded on first access.
"""

from kvtier.vllm.layout import (  # noqa: F401
    PageGeometry,
    RequestPlan,
    batch_ranges,
    layout_fingerprint,
    matched_tokens,
    namespace_tenant,
    natural_layer_order,
    page_geometry,
)

__all__ = [
    "KvtierConnector",
    "PageGeometry",
    "RequestPlan",
    "batch_ranges",
    "layout_fingerprint",
    "matched_tokens",
    "namespace_tenant",
    "natural_layer_order",
    "page_geometry",
]


def __getattr__(name):
    if name in ("KvtierConnector", "KvtierConnectorMetadata"):
        from kvtier.vllm import connector

        return getattr(connector, name)
    raise AttributeError(f"module 'kvtier.vllm' has no attribute {name!r}")
