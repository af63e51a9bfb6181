# SKIPRING_SIMGRID=ON: the build for SimGrid SMPI (scripts/sim_build.sh configures it).
#
# Configure with CMAKE_CXX_COMPILER=smpicxx and CMAKE_C_COMPILER=smpicc: the wrappers supply
# SimGrid's mpi.h, link libsimgrid and make every executable a shared object that smpirun
# loads once per simulated rank. So there is no MPI package to find: MPI::MPI_C and
# MPI::MPI_CXX are empty targets here, and the rest of the build links them as usual.
#
# What this build contains: libskipring as a static library (its globals then live in the
# executable, which SMPI privatises per rank; a shared libskipring would be shared by all
# ranks) and the experiment driver apps/skipring_sim. No PMPI library (SimGrid defines
# MPI_Allreduce itself), no tests, no install rules, no hwloc/UCX/CUDA/Fortran.

get_filename_component(_skipring_cxx_name "${CMAKE_CXX_COMPILER}" NAME)
if(NOT _skipring_cxx_name MATCHES "^smpic")
  message(FATAL_ERROR "SKIPRING_SIMGRID=ON needs CMAKE_CXX_COMPILER=smpicxx and "
                      "CMAKE_C_COMPILER=smpicc (got ${CMAKE_CXX_COMPILER}); "
                      "scripts/sim_build.sh configures build-sim/ that way")
endif()

foreach(_skipring_mpi_target MPI::MPI_C MPI::MPI_CXX)
  if(NOT TARGET ${_skipring_mpi_target})
    add_library(${_skipring_mpi_target} INTERFACE IMPORTED)
  endif()
endforeach()

set(SKIPRING_BUILD_TESTS OFF CACHE BOOL "Build the tests" FORCE)
set(SKIPRING_WITH_CUDA OFF CACHE BOOL "Build CUDA device-buffer paths" FORCE)

# Called on libskipring once it exists: the SMPI-only sources, and the transport's poll
# (MPI_Testsome) routed through sim/smpi_wait so an idle rank can block until its next event.
function(skipring_simgrid_library target)
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/sim/smpi_wait.cpp)
  set_source_files_properties(${PROJECT_SOURCE_DIR}/runtime/mpi_transport.cpp
    TARGET_DIRECTORY ${target}
    PROPERTIES COMPILE_OPTIONS "-include;${PROJECT_SOURCE_DIR}/sim/smpi_poll_redirect.h")
endfunction()
