# Block identity: chained keys, CBOR serialization, checksums.
