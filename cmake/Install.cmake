# Install rules, CMake package config (find_package(skipring)) and pkg-config file.
include(CMakePackageConfigHelpers)

set(SKIPRING_INSTALL_TARGETS skipring)
if(TARGET skipring_pmpi)
  list(APPEND SKIPRING_INSTALL_TARGETS skipring_pmpi)
endif()
# Relocatable: the libraries find each other next to themselves, whatever the prefix.
set_target_properties(${SKIPRING_INSTALL_TARGETS} PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS ${SKIPRING_INSTALL_TARGETS} EXPORT skipringTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/skipring
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${SKIPRING_GENERATED_INCLUDE_DIR}/skipring/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/skipring)
install(EXPORT skipringTargets NAMESPACE skipring::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/skipring)

# The MPI skipring was built with: a consumer must use the same one (libskipring.so links it;
# two MPIs in one process crash at MPI_Init or skipring_init). skipringConfig.cmake refuses a
# consumer whose FindMPI finds another MPI; skipring.pc requires the MPI's own pkg-config module.
set(SKIPRING_PC_MPI_REQUIRES "")
if(SKIPRING_MPI_VENDOR STREQUAL "Open MPI")
  set(SKIPRING_PC_MPI_REQUIRES "ompi-c")
elseif(SKIPRING_MPI_VENDOR STREQUAL "MPICH")
  set(SKIPRING_PC_MPI_REQUIRES "mpich")
else()
  message(WARNING "skipring: unrecognised MPI (${MPI_C_LIBRARIES}): skipring.pc requires no MPI "
                  "module (build consumers with this MPI's compiler wrapper) and "
                  "skipringConfig.cmake cannot check a consumer's MPI")
endif()
if(SKIPRING_PC_MPI_REQUIRES)
  set(SKIPRING_PC_REQUIRES_LINE "Requires: ${SKIPRING_PC_MPI_REQUIRES}")
else()
  set(SKIPRING_PC_REQUIRES_LINE "# Requires: none (unrecognised MPI: use its compiler wrapper)")
endif()
install(FILES ${PROJECT_SOURCE_DIR}/cmake/skipringMpiVendor.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/skipring)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/skipringConfig.cmake.in
  ${PROJECT_BINARY_DIR}/skipringConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/skipring)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/skipringConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/skipringConfig.cmake
              ${PROJECT_BINARY_DIR}/skipringConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/skipring)

# The .pc file locates the prefix relative to itself, so an installed tree can be moved.
file(RELATIVE_PATH SKIPRING_PC_RELPREFIX "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
     "${CMAKE_INSTALL_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/skipring.pc.in ${PROJECT_BINARY_DIR}/skipring.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/skipring.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
