# The replay driver (replay.h): the real store and policies on a virtual clock.
kvtier_add_sources(replay/replay.cc replay/trace_blocks.cc)
kvtier_add_tests(concurrency replay/replay_test.cc)
