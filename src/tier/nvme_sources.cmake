# T3 NVMe tier: slot files through io_uring (liburing), pread/pwrite where io_uring is refused.
kvtier_add_sources(tier/nvme_io.cc tier/nvme_tier.cc)
kvtier_add_tests(io tier/nvme_tier_test.cc)
find_library(URING_LIBRARY uring REQUIRED)
target_link_libraries(kvtier PRIVATE ${URING_LIBRARY} ${CMAKE_DL_LIBS})
