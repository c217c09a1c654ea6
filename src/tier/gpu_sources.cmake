# T0 GPU HBM tier: a cudaMalloc'd pool in size classes, copies through pinned staging
# buffers on non-blocking streams. Always compiled: without CUDA its factory returns
# Unsupported, and its tests check that (and skip the device tests where no GPU answers).
kvtier_add_sources(tier/gpu_hbm_tier.cc)
kvtier_add_tests(io tier/gpu_hbm_tier_test.cc)
