# The load-or-recompute cost model (cost_model.h) and the adaptive prefetch window (prefetch_window.h).
kvtier_add_sources(store/cost_model.cc store/prefetch_window.cc)
kvtier_add_tests(pure store/cost_model_test.cc)
kvtier_add_tests(concurrency store/prefetch_window_test.cc)
