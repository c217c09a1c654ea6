# T4 remote-pool tier: Redis Cluster or a hash ring of standalone Redis / Valkey nodes,
# through hiredis. The tests start real redis-server processes (skipped when it is absent).
kvtier_add_sources(tier/redis_connection.cc tier/redis_value_reader.cc tier/redis_node.cc tier/redis_cluster_slots.cc tier/hash_ring.cc
                   tier/redis_router.cc tier/remote_tier.cc)
kvtier_add_tests(io tier/remote_tier_test.cc testing/redis_server.cc)
find_path(HIREDIS_INCLUDE_DIR hiredis/hiredis.h REQUIRED)
find_library(HIREDIS_LIBRARY hiredis REQUIRED)
target_include_directories(kvtier PRIVATE ${HIREDIS_INCLUDE_DIR})
target_link_libraries(kvtier PRIVATE ${HIREDIS_LIBRARY})
