# The tiered store itself (store.h), in parts with one job each (store_state.h lists them).
kvtier_add_sources(store/tiered_store.cc store/store_state.cc store/store_put.cc store/store_read.cc
                   store/store_moves.cc store/store_shared.cc store/shared_card.cc)
kvtier_add_tests(concurrency store/tiered_store_test.cc store/expected_reads_test.cc store/store_concurrency_test.cc)
# Sharing a tier between nodes: two stores over one real Redis (skipped without redis-server);
# the promotion gate over a parallel FS in a temporary directory.
kvtier_add_tests(io store/store_shared_test.cc store/store_promotion_test.cc)
