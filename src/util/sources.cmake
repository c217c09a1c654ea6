kvtier_add_sources(util/status.cc util/json_document.cc util/task_pool.cc)
kvtier_add_tests(pure util/status_test.cc util/json_document_test.cc util/little_endian_test.cc)
kvtier_add_tests(concurrency util/task_pool_test.cc util/rw_mutex_test.cc util/profiled_rw_mutex_test.cc)
