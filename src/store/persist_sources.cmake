# Durable blocks: the block journal (block_journal.h) and the store's persistence tests.
kvtier_add_sources(store/block_journal.cc)
kvtier_add_tests(io store/block_journal_test.cc store/store_persist_test.cc)
