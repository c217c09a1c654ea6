# The tiered store itself (store.h), in parts with one job each (store_state.h lists them).
kvtier_add_sources(store/tiered_store.cc store/store_state.cc store/store_put.cc store/store_read.cc
                   store/store_moves.cc)
kvtier_add_tests(concurrency store/tiered_store_test.cc store/expected_reads_test.cc)
