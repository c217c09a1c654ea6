# The prefix index.
kvtier_add_sources(index/prefix_index.cc)
kvtier_add_tests(concurrency index/prefix_index_test.cc)
