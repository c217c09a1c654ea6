# The tiered store (store.h) and the parts it is made of.
include(store/store_core_sources.cmake OPTIONAL)
include(store/head_sources.cmake OPTIONAL)
include(store/cost_sources.cmake OPTIONAL)
include(store/persist_sources.cmake OPTIONAL)
