# Test labels. Every test carries exactly one, by what it exercises:
#   pure         parsing and arithmetic: one thread, no files written, no sockets, no child
#                processes (reading fixtures is allowed);
#   io           files, sockets, devices or child processes (crash tests, daemons, Redis);
#   concurrency  threads, the library's own included (a store's movers, a tier's async API,
#                a task pool);
#   cluster      several daemons and a Redis Cluster, each in a network namespace of its own
#                (tools/cluster; needs root, skipped without it).
# KVTIER_TEST_LABELS says which labels are built and registered with ctest. The TSan preset
# builds only io and concurrency: ThreadSanitizer finds nothing in single-threaded code, and a
# preset should build only what it runs. ctest -L selects among those that are built.
set(KVTIER_ALL_TEST_LABELS pure io concurrency cluster)
# The labels with a unit-test executable each (src/CMakeLists.txt); cluster tests are scripts.
set(KVTIER_UNIT_TEST_LABELS pure io concurrency)
set(KVTIER_TEST_LABELS "${KVTIER_ALL_TEST_LABELS}" CACHE STRING
    "Labels of the tests to build and register: any of pure, io, concurrency, cluster")
foreach(_kvtier_label IN LISTS KVTIER_TEST_LABELS)
  if(NOT _kvtier_label IN_LIST KVTIER_ALL_TEST_LABELS)
    message(FATAL_ERROR "KVTIER_TEST_LABELS: unknown label '${_kvtier_label}' (labels: ${KVTIER_ALL_TEST_LABELS})")
  endif()
endforeach()

# kvtier_tests_enabled(<label> <out-var>): whether the tests of <label> are built.
function(kvtier_tests_enabled label out_var)
  if(NOT label IN_LIST KVTIER_ALL_TEST_LABELS)
    message(FATAL_ERROR "kvtier: unknown test label '${label}' (labels: ${KVTIER_ALL_TEST_LABELS})")
  endif()
  if(KVTIER_BUILD_TESTS AND label IN_LIST KVTIER_TEST_LABELS)
    set(${out_var} ON PARENT_SCOPE)
  else()
    set(${out_var} OFF PARENT_SCOPE)
  endif()
endfunction()

# kvtier_add_test(NAME <name> LABEL <label> COMMAND <cmd>... [PROPERTIES <prop> <value>...]):
# add_test with its label, registered only when the label is built.
function(kvtier_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;LABEL" "COMMAND;PROPERTIES")
  kvtier_tests_enabled(${arg_LABEL} enabled)
  if(enabled)
    add_test(NAME ${arg_NAME} COMMAND ${arg_COMMAND})
    set_tests_properties(${arg_NAME} PROPERTIES LABELS ${arg_LABEL} ${arg_PROPERTIES})
  endif()
endfunction()
