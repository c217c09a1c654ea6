"""Configuration of kvtier's TensorRT-LLM connector: no TensorRT-LLM or torch import.

TensorRT-LLM builds both connector classes with one argument, its ``TorchLlmArgs``, and its
``KvCacheConnectorConfig`` takes no free-form options. So everything the connector needs is
one URL, read once when a class is built, from the first of:

1. ``llm_args.kv_connector_config.server_url`` (the field TensorRT-LLM has for "an external
   connector server"; releases without it skip this), then
2. the environment variable ``KVTIER_TRTLLM_SERVER_URL`` (it must reach every rank).

``unix:///run/kvtier/kvtier.sock?tenant=acme&shared_memory_bytes=268435456`` names the
daemon's Unix socket and, in the query, the options of :data:`OPTION_DEFAULTS`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from kvtier.sglang.keys import truthy
from kvtier.vllm.layout import DEFAULT_TAIL_GRANULARITY, layout_fingerprint, namespace_tenant, shard_tenants

ENV_SERVER_URL = "KVTIER_TRTLLM_SERVER_URL"
KEY_ALGORITHM = "xxh3_128"  # kvtier's own chain hash: a digest is the 16-byte key
ROOT_SEED = "kvtier-trtllm"  # the root of every chain (keys are not shared with other engines)

# Query options of the server URL, with their defaults.
OPTION_DEFAULTS = {
    "tenant": "",  # kvtier tenant (auth/isolation); the namespace is folded into it
    "auth_token": "",
    "model": "",  # the model's name in the namespace; default str(llm_args.model)
    "fold_namespace": "1",  # 0: use tenant as is
    "shared_memory_bytes": str(256 << 20),  # the worker's segment; one block must fit
    "use_cost_model": "1",  # 0: load the whole stored prefix, not only what is worth loading
    # Store the block a prompt ends in as a tail of this many tokens' granularity (0: off); a
    # granularity of tokens_per_block or more leaves no tail length below a whole block.
    "partial_block_tokens": str(DEFAULT_TAIL_GRANULARITY),
}


@dataclass(frozen=True)
class ConnectorOptions:
    socket_path: str
    auth_token: str
    shared_memory_bytes: int
    use_cost_model: bool
    partial_block_tokens: int  # tail granularity in tokens; 0: no tails
    block_size: int  # tokens per TensorRT-LLM KV block, one kvtier block each
    tp_size: int
    tenants: tuple  # per tensor-parallel rank
    description: dict  # what the namespace's fingerprint covers


def parse_server_url(url: str) -> tuple[str, dict]:
    """(socket path, options) of ``unix://PATH?key=value&...``; unknown keys are refused."""
    parts = urlsplit(url)
    if parts.scheme != "unix":
        if parts.scheme in ("tcp", "http", "https"):
            raise NotImplementedError(
                f"kvtier TensorRT-LLM connector: server_url {url!r}: only a Unix socket is supported "
                "(payloads travel through shared memory); run `kvtier serve` on this node and use "
                "unix:///path/to/kvtier.sock")
        raise ValueError(f"kvtier TensorRT-LLM connector: server_url {url!r} is not of the form "
                         "unix:///path/to/kvtier.sock[?tenant=...]")
    path = unquote(parts.netloc + parts.path)
    if not path:
        raise ValueError(f"kvtier TensorRT-LLM connector: server_url {url!r} names no socket path")
    options = dict(OPTION_DEFAULTS)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in OPTION_DEFAULTS:
            raise ValueError(f"kvtier TensorRT-LLM connector: unknown option {key!r} in server_url; "
                             f"known: {', '.join(sorted(OPTION_DEFAULTS))}")
        options[key] = value
    return path, options


def server_url(llm_args, environ: Optional[Mapping[str, str]] = None) -> str:
    connector = getattr(llm_args, "kv_connector_config", None)
    url = getattr(connector, "server_url", None) if connector is not None else None
    if not url:
        url = (os.environ if environ is None else environ).get(ENV_SERVER_URL, "")
    if not url:
        raise ValueError("kvtier TensorRT-LLM connector: no kvtier server named: set "
                         "kv_connector_config.server_url, or the environment variable "
                         f"{ENV_SERVER_URL}, to unix:///path/to/kvtier.sock")
    return url


def check_supported(llm_args) -> None:
    """Refuses what the connector cannot serve correctly, before it touches a block."""
    def get(name, default=None):
        return getattr(llm_args, name, default)

    if (get("pipeline_parallel_size", 1) or 1) != 1:
        raise NotImplementedError("kvtier TensorRT-LLM connector: pipeline parallelism is not supported "
                                  "(TensorRT-LLM's connector API refuses it too)")
    if (get("context_parallel_size", 1) or 1) != 1:
        raise NotImplementedError("kvtier TensorRT-LLM connector: context parallelism is not supported")
    if get("enable_attention_dp", False):
        raise NotImplementedError("kvtier TensorRT-LLM connector: attention data parallelism is not "
                                  "supported (the ranks hold different requests); set enable_attention_dp=False")
    if (get("max_beam_width", 1) or 1) != 1:
        raise NotImplementedError("kvtier TensorRT-LLM connector: beam search is not supported "
                                  "(only beam 0's blocks are keyed); set max_beam_width=1")
    if get("speculative_config") is not None:
        raise NotImplementedError("kvtier TensorRT-LLM connector: speculative decoding is not supported")
    kv = get("kv_cache_config")
    windows = getattr(kv, "max_attention_window", None) if kv is not None else None
    if windows and len(set(windows)) > 1:
        raise NotImplementedError("kvtier TensorRT-LLM connector: variable sliding-window attention "
                                  "(several max_attention_window values) is not supported")


def connector_options(llm_args, environ: Optional[Mapping[str, str]] = None) -> ConnectorOptions:
    """Validates ``llm_args`` and the server URL; the same answer on the scheduler and every
    worker (their namespaces must agree)."""
    check_supported(llm_args)
    path, opts = parse_server_url(server_url(llm_args, environ))
    kv = getattr(llm_args, "kv_cache_config", None)
    block_size = int(getattr(kv, "tokens_per_block", 0) or 0)
    if block_size <= 0:
        raise ValueError("kvtier TensorRT-LLM connector: kv_cache_config.tokens_per_block must be positive")
    try:
        shm = int(opts["shared_memory_bytes"])
    except ValueError:
        raise ValueError(f"kvtier TensorRT-LLM connector: shared_memory_bytes "
                         f"{opts['shared_memory_bytes']!r} is not an integer") from None
    if shm <= 0:
        raise ValueError("kvtier TensorRT-LLM connector: shared_memory_bytes must be positive")
    try:
        tail_granularity = int(opts["partial_block_tokens"])
    except ValueError:
        raise ValueError(f"kvtier TensorRT-LLM connector: partial_block_tokens "
                         f"{opts['partial_block_tokens']!r} is not an integer") from None
    if tail_granularity < 0:
        raise ValueError("kvtier TensorRT-LLM connector: partial_block_tokens must be 0 (no tails) or positive")
    tp_size = int(getattr(llm_args, "tensor_parallel_size", 1) or 1)
    quant = getattr(llm_args, "quant_config", None)
    description = {
        "connector": "kvtier.trtllm/1",
        "tokens_per_block": block_size,
        "kv_cache_dtype": str(getattr(kv, "dtype", "auto")),
        "kv_cache_quant_algo": str(getattr(quant, "kv_cache_quant_algo", None)),
        "dtype": str(getattr(llm_args, "dtype", "auto")),
        "tp": tp_size,
        "keys": f"{KEY_ALGORITHM}/{ROOT_SEED}",
    }
    model = opts["model"] or str(getattr(llm_args, "model", "") or "")
    tenant = opts["tenant"]
    if truthy(opts["fold_namespace"]):
        tenant = namespace_tenant(tenant, model, layout_fingerprint(description))
    # Each rank holds its own KV heads: its own namespace (MLA's replicated latent cache too,
    # which costs a copy per rank but stays correct).
    tenants = tuple(shard_tenants(tenant, tp_size, replicated=False))
    return ConnectorOptions(path, opts["auth_token"], shm, truthy(opts["use_cost_model"]), tail_granularity,
                            block_size, tp_size, tenants, description)
