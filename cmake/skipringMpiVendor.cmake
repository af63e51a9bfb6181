# Which MPI FindMPI found, from its mpi.h (the library's version string as a fallback):
#   skipring_mpi_vendor(<vendor-var> <version-var>)
# sets <vendor-var> to "Open MPI", "MPICH" (MPICH and its derivatives: their mpi.h defines
# MPICH_VERSION) or "unknown", and <version-var> to the version the header states (or "").
# Used at build time (the recorded MPI of skipring.pc and skipringConfig.cmake, the launcher's
# way of passing environment variables in the tests) and installed next to skipringConfig.cmake,
# which compares a consumer's MPI against the recorded one.
function(skipring_mpi_vendor vendor_var version_var)
  set(_vendor "unknown")
  set(_version "")
  set(_dirs ${MPI_C_HEADER_DIR} ${MPI_C_INCLUDE_DIRS} ${MPI_C_COMPILER_INCLUDE_DIRS}
            ${MPI_C_ADDITIONAL_INCLUDE_DIRS})
  foreach(_dir IN LISTS _dirs)
    if(NOT _vendor STREQUAL "unknown" OR NOT EXISTS "${_dir}/mpi.h")
      continue()
    endif()
    file(STRINGS "${_dir}/mpi.h" _lines
         REGEX "^#define[ \t]+(OPEN_MPI|OMPI_(MAJOR|MINOR|RELEASE)_VERSION|MPICH_VERSION)[ \t]")
    set(_ompi_parts "")
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "^#define[ \t]+OPEN_MPI[ \t]+1")
        set(_vendor "Open MPI")
      elseif(_line MATCHES "^#define[ \t]+OMPI_(MAJOR|MINOR|RELEASE)_VERSION[ \t]+([0-9]+)")
        list(APPEND _ompi_parts ${CMAKE_MATCH_2})
      elseif(_line MATCHES "^#define[ \t]+MPICH_VERSION[ \t]+\"([^\"]*)\"")
        set(_vendor "MPICH")
        set(_version "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    if(_vendor STREQUAL "Open MPI")
      list(JOIN _ompi_parts "." _version)
    endif()
  endforeach()
  # No readable mpi.h (a wrapper-only setup): FindMPI's run of MPI_Get_library_version.
  if(_vendor STREQUAL "unknown" AND DEFINED MPI_C_LIBRARY_VERSION_STRING)
    if(MPI_C_LIBRARY_VERSION_STRING MATCHES "Open MPI v([0-9.]+)")
      set(_vendor "Open MPI")
      set(_version "${CMAKE_MATCH_1}")
    elseif(MPI_C_LIBRARY_VERSION_STRING MATCHES "MPICH Version:[ \t]*([0-9][^ \t\n]*)")
      set(_vendor "MPICH")
      set(_version "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${vendor_var} "${_vendor}" PARENT_SCOPE)
  set(${version_var} "${_version}" PARENT_SCOPE)
endfunction()
