# The tiered store itself (store.h).
kvtier_add_sources(store/tiered_store.cc)
kvtier_add_tests(concurrency store/tiered_store_test.cc store/expected_reads_test.cc)
