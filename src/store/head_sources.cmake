# Head-granular eviction: the block layout cut into head units, and the head-importance matrix.
kvtier_add_sources(store/kv_block_layout.cc store/head_importance.cc)
kvtier_add_tests(pure store/kv_block_layout_test.cc)
kvtier_add_tests(concurrency store/head_importance_test.cc)
