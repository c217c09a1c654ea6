# Precompiled headers: the standard library and third-party headers that most of a target's
# files include are parsed once per target, not once per file. A fresh machine compiles the
# project six times in CI (release, ASan, TSan, plain, wheel, fuzz); without them most of each
# compile is reparsing these headers (docs/CONTRIBUTING.md, "CI on a fresh machine", has the measurement).
#
# kvtier_precompile_headers(<target> [GTEST] [JSON] [CLI11]): the standard headers below, plus
# GoogleTest, nlohmann-json or CLI11 for targets whose files mostly include them.
# A header in a target's set is visible to all its files, so a file that forgets to include
# one it uses still compiles here; CMake's own switch CMAKE_DISABLE_PRECOMPILE_HEADERS=ON
# builds without them, and CI's plain build does, so such a file fails there.
#
# ccache: a compile that uses a precompiled header is cached only with the sloppiness that
# cmake/Ccache.cmake sets (pch_defines, time_macros, include_file_mtime, include_file_ctime);
# the header itself is hashed, so a changed set misses as it should.
set(KVTIER_PCH_STANDARD_HEADERS
    <algorithm> <array> <atomic> <chrono> <cstddef> <cstdint> <cstring> <functional> <map>
    <memory> <mutex> <optional> <span> <string> <string_view> <thread> <unordered_map>
    <utility> <vector>)

function(kvtier_precompile_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "GTEST;JSON;CLI11" "" "")
  set(headers ${KVTIER_PCH_STANDARD_HEADERS})
  if(arg_GTEST)
    list(APPEND headers <gtest/gtest.h>)
  endif()
  if(arg_JSON)
    list(APPEND headers <nlohmann/json.hpp>)
  endif()
  if(arg_CLI11)
    list(APPEND headers <CLI/CLI.hpp>)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
  # GCC 12, with libstdc++ precompiled, reports std::string's known false -Warray-bounds when
  # optimising (a string built with operator+ in our code; without the precompiled header it
  # stays silent, as for any system header). Bounds are still checked by
  # clang in the fuzz preset and by ASan at run time.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-array-bounds)
  endif()
endfunction()
