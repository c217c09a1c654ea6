# The service's wire protocol (protocol.h) and, later, the server itself.
kvtier_add_sources(server/protocol.cc)
kvtier_add_tests(server/protocol_test.cc)
