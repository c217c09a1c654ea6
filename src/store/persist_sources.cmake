# Durable blocks: the block journal (block_journal.h), the store's persistence
# (store_persist.cc) and its tests.
kvtier_add_sources(store/block_journal.cc store/store_persist.cc)
kvtier_add_tests(io store/block_journal_test.cc store/store_persist_test.cc
                    store/store_integrity_test.cc)
