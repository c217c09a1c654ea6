# The load-or-recompute cost model (cost_model.h), the adaptive prefetch window
# (prefetch_window.h) and the promotion gate (promotion_gate.h).
kvtier_add_sources(store/cost_model.cc store/prefetch_window.cc store/promotion_gate.cc)
kvtier_add_tests(pure store/cost_model_test.cc)
kvtier_add_tests(concurrency store/prefetch_window_test.cc store/promotion_gate_test.cc)
