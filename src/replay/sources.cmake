# Trace replay: readers, tokenizer, the optimal bound and the replay driver.
include(replay/reader_sources.cmake OPTIONAL)
include(replay/opt_sources.cmake OPTIONAL)
include(replay/replay_sources.cmake OPTIONAL)
# The paper's ablation and tier ladder (ablation.h): the replay with one part removed at a time.
kvtier_add_sources(replay/ablation.cc)
kvtier_add_tests(pure replay/ablation_test.cc)
