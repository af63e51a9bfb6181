// A datatype-size mismatch across ranks (issue 13): rank 0 calls skipring_allreduce with
// MPI_FLOAT, the others with MPI_DOUBLE, same count. Every rank must get an MPI error code,
// never a heap overflow (Open MPI 4.1's single-copy path writes an oversized message past the
// receive buffer, hence OMPI_MCA_btl_vader_single_copy_mechanism=cma in the test's
// environment) and never a hang (a ctest timeout). Each count runs on its own duplicate of
// MPI_COMM_WORLD (a protocol error marks the communicator broken). Counts (SKIPRING_ALGO=ring,
// 2 ranks): 100 (both pack; 432 bytes into a 232-byte receive), 3000 (both pack; 12032 bytes,
// a CMA rendezvous, into a 6032-byte receive) and 5000 (one packs, one splits: a 10032-byte
// packed message into a 32-byte header receive). Before the fix, 3000 corrupted the heap.
// Larger counts are left out: there the two sides' segment layouts differ, the rank that sees
// the wrong size fails and its peer waits for messages that never come (issue 13 item 1's
// watchdog turns that wait into an error).
#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &mpitest::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpitest::g_size);
  const bool narrow = mpitest::g_rank == 0;
  std::vector<int> counts = {100, 3000, 5000};
  if (argc > 1) counts = {std::atoi(argv[1])};  // one count, for debugging
  for (int count : counts) {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    const size_t elem = narrow ? sizeof(float) : sizeof(double);
    // Guard bytes after the receive buffer: nothing may write them.
    std::vector<unsigned char> in(count * elem, 0), out(count * elem + 4096, 0x5A);
    if (narrow) {
      for (int i = 0; i < count; ++i) reinterpret_cast<float*>(in.data())[i] = 1.0f;
    } else {
      for (int i = 0; i < count; ++i) reinterpret_cast<double*>(in.data())[i] = 1.0;
    }
    const int rc = skipring_allreduce(in.data(), out.data(), count, narrow ? MPI_FLOAT : MPI_DOUBLE,
                                      MPI_SUM, comm);
    mpitest::check(rc != MPI_SUCCESS, "count " + std::to_string(count) +
                                          ": float against double returned MPI_SUCCESS");
    bool guard = true;
    for (size_t i = count * elem; i < out.size(); ++i) guard = guard && out[i] == 0x5A;
    mpitest::check(guard, "count " + std::to_string(count) + ": bytes written past recvbuf");
    MPI_Comm_free(&comm);
    PMPI_Barrier(MPI_COMM_WORLD);
  }
  const int code = mpitest::finish();
  MPI_Finalize();
  return code;
}
