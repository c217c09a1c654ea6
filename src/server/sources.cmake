# The service's wire protocol (protocol.h).
kvtier_add_sources(server/protocol.cc)
kvtier_add_tests(pure server/protocol_test.cc server/tenant_namespace_test.cc)

# Metrics of `kvtier serve`: service counters, the Prometheus rendering and the HTTP endpoint.
kvtier_add_sources(server/service_metrics.cc server/metrics_http.cc)
kvtier_add_tests(concurrency server/service_metrics_test.cc)
kvtier_add_tests(io server/metrics_http_test.cc)
kvtier_tests_enabled(io io_tests)
if(io_tests)
  # The test's HTTP client: httplib's classes change with its defines, so take them from it.
  target_link_libraries(kvtier_io_tests PRIVATE PkgConfig::HTTPLIB)
endif()

# The service (server.h) and its client (client.h): frames over sockets (plain or TLS),
# shared memory, tenants and the per-connection sessions.
kvtier_add_sources(server/byte_stream.cc server/frame_io.cc server/frame_assembler.cc server/event_loop.cc server/request_budget.cc server/connection.cc server/tls.cc server/shared_segment.cc server/tenant_namespace.cc server/session.cc
                   server/server.cc server/client.cc)
kvtier_add_tests(io server/server_test.cc server/server_event_loop_test.cc server/request_budget_test.cc server/frame_assembler_test.cc server/frame_io_test.cc server/tls_test.cc testing/test_certs.cc testing/test_certs_test.cc)
kvtier_tests_enabled(io io_tests)
if(io_tests)
  # testing/test_certs.h makes the TLS tests' certificates with OpenSSL.
  target_link_libraries(kvtier_io_tests PRIVATE OpenSSL::Crypto)
endif()

# The daemon of `kvtier serve` (daemon.h): configuration, store, listeners, metrics.
kvtier_add_sources(server/serve_config.cc server/tier_health.cc server/descriptor_limit.cc server/daemon.cc)
kvtier_add_tests(io server/daemon_test.cc)
kvtier_add_tests(pure server/descriptor_limit_test.cc)
kvtier_add_tests(concurrency server/tier_health_test.cc)
