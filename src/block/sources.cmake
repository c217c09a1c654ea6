# Block identity: chained keys, CBOR serialization, checksums.
kvtier_add_sources(block/block_hasher.cc)
kvtier_add_tests(io block/block_hasher_test.cc)
# The checksum's AVX2 kernel (checksum_kernels.h), chosen at run time on x86-64 CPUs with AVX2.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  kvtier_add_sources(block/checksum_avx2.cc)
  # A precompiled header made without -mavx2 cannot be used with it (GCC refuses it).
  set_source_files_properties(block/checksum_avx2.cc PROPERTIES COMPILE_OPTIONS "-mavx2" SKIP_PRECOMPILE_HEADERS ON)
  set_source_files_properties(block/block_hasher.cc PROPERTIES COMPILE_DEFINITIONS KVTIER_HAVE_AVX2_KERNEL=1)
endif()
