# What `cmake --install <build> --prefix P` puts under P, and how other
# projects find it:
#   include/perserve/*.h             the public headers (client, C ABIs, Status, Schema)
#   lib/libperserve_client.so        perserve::client (MPI and C++20 come with it)
#   lib/libperserve_tree.so          perserve::tree (the priority tree's C ABI)
#   bin/perserve-server              perserve::server (an imported executable)
#   lib/cmake/perserve/              perserveConfig.cmake, its version file, the targets
#   lib/pkgconfig/perserve.pc        the client library for pkg-config
#   share/perserve/examples/         client/examples: the README's first programs and the Ape-X agent
#   PERSERVE_PYTHON_INSTALL_DIR      the Python package (client/python/CMakeLists.txt)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PERSERVE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/perserve)

install(FILES ${PROJECT_SOURCE_DIR}/client/include/perserve/tree_c.h
              ${PROJECT_SOURCE_DIR}/common/include/perserve/status.h
              ${PROJECT_SOURCE_DIR}/common/include/perserve/schema.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/perserve)
set_target_properties(perserve_tree PROPERTIES EXPORT_NAME tree)
add_library(perserve::tree ALIAS perserve_tree)
set(PERSERVE_EXPORTED_TARGETS perserve_tree)
set(PERSERVE_HAS_CLIENT OFF)

if(NOT PERSERVE_TREE_ONLY)
  install(FILES ${PROJECT_SOURCE_DIR}/client/include/perserve/client.h
                ${PROJECT_SOURCE_DIR}/client/include/perserve/client_c.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/perserve)
  set_target_properties(perserve-server PROPERTIES EXPORT_NAME server)
  list(APPEND PERSERVE_EXPORTED_TARGETS perserve_client perserve-server)
  set(PERSERVE_HAS_CLIENT ON)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/perserve/examples
          USE_SOURCE_PERMISSIONS)
endif()

install(TARGETS ${PERSERVE_EXPORTED_TARGETS} EXPORT perserveTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT perserveTargets NAMESPACE perserve:: DESTINATION ${PERSERVE_CMAKE_INSTALL_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/perserveConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/perserveConfig.cmake
                              INSTALL_DESTINATION ${PERSERVE_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/perserveConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/perserveConfig.cmake ${PROJECT_BINARY_DIR}/cmake/perserveConfigVersion.cmake
        DESTINATION ${PERSERVE_CMAKE_INSTALL_DIR})

if(NOT PERSERVE_TREE_ONLY)
  # pkg-config: MPI's flags are spelled out (MPI implementations name their
  # .pc files differently, and some have none).
  list(JOIN MPI_CXX_INCLUDE_DIRS " -I" PERSERVE_PC_MPI_INCLUDES)
  set(PERSERVE_PC_MPI_LIBS "")
  foreach(lib IN LISTS MPI_CXX_LIBRARIES)
    string(APPEND PERSERVE_PC_MPI_LIBS " ${lib}")
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/perserve.pc.in ${PROJECT_BINARY_DIR}/cmake/perserve.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cmake/perserve.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
