# The tiers (tier.h, tiers.h) and their test decorators.
kvtier_add_sources(tier/tier.cc tier/memory_region.cc tier/region_prefaulter.cc tier/size_class_allocator.cc tier/dram_tier.cc tier/tier_config.cc tier/aligned_buffer_pool.cc)
kvtier_add_tests(pure tier/size_class_allocator_test.cc)
kvtier_add_tests(io tier/dram_tier_test.cc tier/tier_config_test.cc testing/faulty_tier_test.cc)
kvtier_add_tests(concurrency tier/aligned_buffer_pool_test.cc tier/region_prefaulter_test.cc)
include(tier/parallel_fs_sources.cmake OPTIONAL)
include(tier/nvme_sources.cmake OPTIONAL)
include(tier/gpu_sources.cmake OPTIONAL)
include(tier/remote_sources.cmake OPTIONAL)
