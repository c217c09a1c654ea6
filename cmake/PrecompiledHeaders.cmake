# Precompiled headers: the standard library and third-party headers that most of a target's
# files include are parsed once per target, not once per file. A fresh machine compiles the
# project six times in CI; reparsing these headers is from a twentieth (a large test file) to
# half (a small file) of a file's compile time (docs/CONTRIBUTING.md, "CI on a fresh
# machine", has the measurement).
#
# KVTIER_PRECOMPILE_HEADERS: ON, OFF, or AUTO (the default): on for GCC without optimisation
# (the asan preset), off otherwise, for two measured reasons:
# - With libstdc++ precompiled, GCC 12 at -O2 reports false -Warray-bounds and
#   -Wstringop-overflow inside std::string (its known false positives, silent for a system
#   header otherwise) in files that build a string with operator+, and warnings are errors;
#   why the precompiled header unmasks them was not looked into.
# - With clang (the fuzz preset) ccache missed the files that used the header when the same
#   commit was built in a clone at another path (183 s, where a warm build takes about 10 s), while
#   the header saved only 34 s of a cold build. GCC's were found in the other clone.
# CMake's own CMAKE_DISABLE_PRECOMPILE_HEADERS=ON also turns them off.
#
# kvtier_precompile_headers(<target> [GTEST] [JSON] [CLI11]): the standard headers below, plus
# GoogleTest, nlohmann-json or CLI11 for targets whose files mostly include them.
# A header in a target's set is visible to all its files, so a file that forgets to include
# one it uses still compiles with them; the release, tsan and fuzz presets build without
# them, and so does CI's plain build on any compiler, so such a file fails there.
#
# ccache: a compile that uses a precompiled header is cached only with the sloppiness that
# cmake/Ccache.cmake sets (pch_defines, time_macros, include_file_mtime, include_file_ctime);
# the header itself is hashed, so a changed set misses as it should.
set(KVTIER_PRECOMPILE_HEADERS "AUTO" CACHE STRING "Precompiled headers: AUTO, ON or OFF")
set_property(CACHE KVTIER_PRECOMPILE_HEADERS PROPERTY STRINGS AUTO ON OFF)
if(KVTIER_PRECOMPILE_HEADERS STREQUAL "AUTO")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    set(_kvtier_use_pch ON)
  else()
    set(_kvtier_use_pch OFF)
  endif()
elseif(KVTIER_PRECOMPILE_HEADERS)
  set(_kvtier_use_pch ON)
else()
  set(_kvtier_use_pch OFF)
endif()

set(KVTIER_PCH_STANDARD_HEADERS
    <algorithm> <array> <atomic> <chrono> <cstddef> <cstdint> <cstring> <functional> <map>
    <memory> <mutex> <optional> <span> <string> <string_view> <thread> <unordered_map>
    <utility> <vector>)

function(kvtier_precompile_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "GTEST;JSON;CLI11" "" "")
  if(NOT _kvtier_use_pch)
    return()
  endif()
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
endfunction()
