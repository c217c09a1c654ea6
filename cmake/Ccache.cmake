# Compiler caching with ccache (Debian's package), so that a rebuild of code some build on this
# machine already compiled, in any clone and any preset, costs almost nothing.
#
# KVTIER_CCACHE: AUTO uses ccache when it is installed, ON requires it, OFF never uses it.
# KVTIER_CCACHE_DIR: the cache, one fixed folder outside the clone, shared by every clone and
#   preset (each preset's flags are part of ccache's key, so presets never mix); default
#   $KVTIER_CACHE_DIR/ccache, else ${XDG_CACHE_HOME:-$HOME/.cache}/kvtier/ccache.
# Paths under the source and build folders are hashed relative to them (base_dir) and the
# working directory is not hashed, so two clones at different paths share their entries.
# The sloppiness is what a compile using a precompiled header needs to be cached
# (cmake/PrecompiledHeaders.cmake; ccache's manual, "Precompiled headers").
set(KVTIER_CCACHE "AUTO" CACHE STRING "Compile through ccache: AUTO, ON or OFF")
set_property(CACHE KVTIER_CCACHE PROPERTY STRINGS AUTO ON OFF)

if(DEFINED ENV{KVTIER_CACHE_DIR})
  set(_kvtier_cache_root "$ENV{KVTIER_CACHE_DIR}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_kvtier_cache_root "$ENV{XDG_CACHE_HOME}/kvtier")
else()
  set(_kvtier_cache_root "$ENV{HOME}/.cache/kvtier")
endif()
set(KVTIER_CCACHE_DIR "${_kvtier_cache_root}/ccache" CACHE PATH "ccache's folder for kvtier builds")

if(NOT KVTIER_CCACHE STREQUAL "OFF")
  find_program(KVTIER_CCACHE_PROGRAM ccache)
  # ccache fails the compile when it cannot write its cache: a folder that cannot be made or
  # written turns the cache off (AUTO) or stops here (ON), never breaks the build later.
  set(_kvtier_unwritable OFF)
  if(KVTIER_CCACHE_PROGRAM)
    execute_process(COMMAND ${CMAKE_COMMAND} -E make_directory "${KVTIER_CCACHE_DIR}"
                    RESULT_VARIABLE _kvtier_mkdir OUTPUT_QUIET ERROR_QUIET)
    execute_process(COMMAND ${CMAKE_COMMAND} -E touch "${KVTIER_CCACHE_DIR}/.kvtier-write-probe"
                    RESULT_VARIABLE _kvtier_touch OUTPUT_QUIET ERROR_QUIET)
    if(NOT _kvtier_mkdir EQUAL 0 OR NOT _kvtier_touch EQUAL 0)
      set(_kvtier_unwritable ON)
    endif()
  endif()
  if(_kvtier_unwritable)
    if(KVTIER_CCACHE STREQUAL "ON")
      message(FATAL_ERROR "KVTIER_CCACHE=ON but ${KVTIER_CCACHE_DIR} cannot be written (set KVTIER_CCACHE_DIR)")
    endif()
    message(STATUS "kvtier: ${KVTIER_CCACHE_DIR} cannot be written; compiling without a cache")
    unset(KVTIER_CCACHE_PROGRAM CACHE)
    set(KVTIER_CCACHE_PROGRAM "")
  endif()
  if(KVTIER_CCACHE_PROGRAM)
    # The settings travel on the launcher's command line, so they hold for `cmake --build`
    # and for IDEs alike, whatever the caller's environment says.
    set(_kvtier_launcher ${CMAKE_COMMAND} -E env
        "CCACHE_DIR=${KVTIER_CCACHE_DIR}" "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
        CCACHE_MAXSIZE=5G CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${KVTIER_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_kvtier_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_kvtier_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_kvtier_launcher})
    message(STATUS "kvtier: compiling through ccache, cache in ${KVTIER_CCACHE_DIR}")
  elseif(KVTIER_CCACHE STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_CCACHE=ON but ccache is not installed (apt-get install ccache)")
  elseif(NOT _kvtier_unwritable)
    message(STATUS "kvtier: ccache not found; compiling without a cache")
  endif()
endif()
