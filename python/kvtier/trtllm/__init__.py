"""kvtier's TensorRT-LLM KV cache connector (docs/trtllm.md).

Load it through TensorRT-LLM's ``kv_connector_config`` (PyTorch backend)::

    KvCacheConnectorConfig(connector_module="kvtier.trtllm.connector",
                           connector_scheduler_class="KvtierConnectorScheduler",
                           connector_worker_class="KvtierConnectorWorker",
                           server_url="unix:///run/kvtier/kvtier.sock")

Importing this package does not import TensorRT-LLM or torch: the configuration helpers live
in :mod:`kvtier.trtllm.options`, and the connector classes are loaded on first access.
"""

from kvtier.trtllm.options import (  # noqa: F401
    ENV_SERVER_URL,
    ConnectorOptions,
    check_supported,
    connector_options,
    parse_server_url,
)

__all__ = [
    "ENV_SERVER_URL",
    "ConnectorOptions",
    "KvtierConnectorMetadata",
    "KvtierConnectorScheduler",
    "KvtierConnectorWorker",
    "check_supported",
    "connector_options",
    "parse_server_url",
]


def __getattr__(name):
    if name in ("KvtierConnectorScheduler", "KvtierConnectorWorker", "KvtierConnectorMetadata"):
        from kvtier.trtllm import connector

        return getattr(connector, name)
    raise AttributeError(f"module 'kvtier.trtllm' has no attribute {name!r}")
