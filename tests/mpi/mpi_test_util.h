// Shared helpers of the mpirun test programs: pass/fail counting with the "N passed, M failed"
// closing line, and the check that nothing is left on skipring's internal communicator.
#pragma once

#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdio>
#include <string>

namespace mpitest {

inline int g_rank = 0, g_size = 1;
inline long g_passed = 0, g_failed = 0;

inline void check(bool cond, const std::string& what) {
  if (cond) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "rank %d FAIL: %s\n", g_rank, what.c_str());
  }
}

// Every message of a finished collective has been received once all ranks pass the first
// barrier; nobody starts the next collective before the second.
inline bool no_leftovers() {
  PMPI_Barrier(MPI_COMM_WORLD);
  int pending = 0;
  const int rc = skipring_pending_messages(MPI_COMM_WORLD, &pending);
  PMPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS && pending == 0;
}

// Sums the counts over ranks, prints the closing line on rank 0; returns the exit code.
inline int finish() {
  long totals[2] = {g_passed, g_failed}, sums[2];
  PMPI_Allreduce(totals, sums, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%ld passed, %ld failed\n", sums[0], sums[1]);
  return sums[1] == 0 ? 0 : 1;
}

}  // namespace mpitest
