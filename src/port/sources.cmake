kvtier_add_sources(port/cuda_device.cc)
kvtier_add_tests(port/cuda_device_test.cc)
