# `cmake --install`: the static library with its public headers, the `kvtier` CLI, and a CMake
# package, so that another project can
#   find_package(kvtier 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE kvtier::kvtier)
# (tests/consumer is such a project; CI builds it against the installed tree). The library is
# static: its private dependencies travel as link-only entries, and kvtierConfig.cmake finds
# them again (cmake/kvtierConfig.cmake.in).
include(CMakePackageConfigHelpers)

set(KVTIER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
# kvtier_warnings rides along only because the static library names it (link-only: it adds
# no flags to a consumer's compiles).
install(TARGETS kvtier kvtier_warnings EXPORT kvtierTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kvtier_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${KVTIER_INSTALL_CMAKEDIR})

set(KVTIER_CONFIG_USES_ICU ${KVTIER_LINKS_ICU})
set(KVTIER_CONFIG_USES_CUDA ${KVTIER_HAVE_CUDA})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvtierConfig.cmake
                              INSTALL_DESTINATION ${KVTIER_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvtierConfig.cmake ${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${KVTIER_INSTALL_CMAKEDIR})
