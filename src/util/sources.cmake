kvtier_add_sources(util/status.cc util/json_document.cc)
kvtier_add_tests(util/status_test.cc util/json_document_test.cc)
