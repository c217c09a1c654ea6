kvtier_add_sources(tier/parallel_fs_tier.cc)
kvtier_add_tests(io tier/parallel_fs_tier_test.cc)
