# Content-addressed payload store and checkpoints.
kvtier_add_sources(
  dedup/payload_store.cc
  dedup/checkpoint_format.cc
  dedup/checkpoint.cc
  dedup/checkpoint_restore.cc)
kvtier_add_tests(concurrency dedup/payload_store_test.cc)
kvtier_add_tests(io dedup/checkpoint_test.cc)
