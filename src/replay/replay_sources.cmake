# The replay driver (replay.h): the real store and policies on a virtual clock.
kvtier_add_sources(replay/replay.cc replay/policy_run.cc replay/prefix_cache_model.cc replay/access_trace.cc
                   replay/trace_blocks.cc)
kvtier_add_tests(concurrency replay/replay_test.cc)
kvtier_add_tests(pure replay/prefix_cache_model_test.cc)
# The engine model (engine_model.h): queueing, chunked prefill and decode on a virtual clock.
kvtier_add_sources(replay/engine_model.cc)
kvtier_add_tests(pure replay/engine_model_test.cc)
