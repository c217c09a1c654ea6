# Head-granular eviction: the block layout cut into head units, and the head-importance matrix.
kvtier_add_sources(store/kv_block_layout.cc store/head_importance.cc)
kvtier_add_tests(store/kv_block_layout_test.cc store/head_importance_test.cc)
