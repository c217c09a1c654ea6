# Block identity: chained keys, CBOR serialization, checksums.
kvtier_add_sources(block/block_hasher.cc)
kvtier_add_tests(block/block_hasher_test.cc)
