# Eviction policies and the Bayesian reuse predictor (eviction_policy.h, reuse_predictor.h,
# tag_inference.h).
kvtier_add_sources(policy/lru_policy.cc policy/ema_policy.cc policy/s3fifo_policy.cc policy/arc_policy.cc
                   policy/bayes_policy.cc policy/predictive_policy.cc policy/reuse_predictor.cc policy/tag_inference.cc policy/policy_factory.cc
                   policy/sharded_policy.cc)
kvtier_add_tests(pure policy/lru_policy_test.cc policy/ema_policy_test.cc
                 policy/s3fifo_policy_test.cc policy/arc_policy_test.cc policy/bayes_policy_test.cc
                 policy/predictive_policy_test.cc
                 policy/tag_inference_test.cc policy/policy_conformance_test.cc)
kvtier_add_tests(concurrency policy/reuse_predictor_test.cc policy/sharded_policy_test.cc)
