# Trace replay: readers, tokenizer, the optimal bound and the replay driver.
include(replay/reader_sources.cmake OPTIONAL)
include(replay/opt_sources.cmake OPTIONAL)
include(replay/replay_sources.cmake OPTIONAL)
