"""kvtier: a tiered KV-cache store for LLM inference engines (docs/python.md).

The bindings live in the extension module ``kvtier._kvtier``; this package re-exports them.

- Sizing: :func:`load_model`, :func:`kv_sizing`, :func:`catalog`.
- Block keys (16-byte ``bytes``): :func:`chain_keys`, :func:`chain_digests`.
- In-process store: :class:`Store`.
- The service: :func:`serve` (``kvtier serve`` in this process) and :class:`Client`.
- Page copies for connectors: :func:`copy_rows` (many row copies, the GIL released once).
- Errors: :class:`KvtierError` and one subclass per status code.
"""

from kvtier._kvtier import (
    AlreadyExistsError,
    AttentionGeometry,
    BlockType,
    Client,
    CorruptionError,
    Daemon,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IoError,
    KvSizing,
    KvtierError,
    ModelSpec,
    NotFoundError,
    PermissionDeniedError,
    PutResult,
    ResourceExhaustedError,
    Store,
    StorePin,
    TransitionType,
    UnavailableError,
    UnsupportedError,
    catalog,
    chain_digests,
    chain_keys,
    copy_rows,
    key_from_hex,
    key_hex,
    kv_sizing,
    load_model,
    serve,
    status_code_name,
)

KEY_BYTES = 16
"""Size of a block key: the first 16 bytes of a block's digest (hi then lo, big-endian)."""

__all__ = [
    "KEY_BYTES",
    "AlreadyExistsError",
    "AttentionGeometry",
    "BlockType",
    "Client",
    "CorruptionError",
    "Daemon",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "KvSizing",
    "KvtierError",
    "ModelSpec",
    "NotFoundError",
    "PermissionDeniedError",
    "PutResult",
    "ResourceExhaustedError",
    "Store",
    "StorePin",
    "TransitionType",
    "UnavailableError",
    "UnsupportedError",
    "catalog",
    "chain_digests",
    "chain_keys",
    "copy_rows",
    "key_from_hex",
    "key_hex",
    "kv_sizing",
    "load_model",
    "serve",
    "status_code_name",
]
