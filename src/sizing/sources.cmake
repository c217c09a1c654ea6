kvtier_add_sources(
  sizing/model_spec.cc
  sizing/layer_pattern.cc
  sizing/parameter_count.cc
  sizing/kv_dtype.cc
  sizing/kv_sizing.cc
  sizing/gpu_memory_plan.cc
  sizing/tier_capacity.cc
  sizing/model_catalog.cc
  sizing/sizing_report.cc)
kvtier_add_tests(pure sizing/model_spec_test.cc sizing/kv_sizing_test.cc
                 sizing/parameter_count_test.cc sizing/capacity_plan_test.cc)
