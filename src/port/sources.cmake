kvtier_add_sources(port/cuda_device.cc port/cuda_host_memory.cc)
kvtier_add_tests(io port/cuda_device_test.cc port/cuda_host_memory_test.cc)
