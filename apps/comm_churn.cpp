// comm_churn: what a new communicator costs. Times N x (MPI_Comm_dup of MPI_COMM_WORLD, one
// 8-byte all-reduce on the copy, MPI_Comm_free) with PMPI_Allreduce and with skipring_allreduce
// (each first all-reduce on a new communicator sets up skipring's state for it), several
// runs of each, alternating; prints the medians per communicator and their ratio
// (issue 13: at most 2x at np 2).
//
//   mpirun -np 2 comm_churn -n 1000 -r 5
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/app_version.h"
#include "skipring/skipring.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds per communicator for n rounds (the slowest rank's time); -1 on an MPI error.
double churn(int n, bool use_skipring) {
  PMPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < n; ++i) {
    MPI_Comm c;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c) != MPI_SUCCESS) return -1;
    uint64_t in = static_cast<uint64_t>(i), out = 0;
    const int rc = use_skipring ? skipring_allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, c)
                                : PMPI_Allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, c);
    if (rc != MPI_SUCCESS || MPI_Comm_free(&c) != MPI_SUCCESS) return -1;
  }
  double t = (MPI_Wtime() - t0) / n, slowest = t;
  PMPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "comm_churn: MPI_Comm_dup + one 8-byte all-reduce + MPI_Comm_free, skipring vs PMPI"};
  app.set_version_flag("--version", skipring_apps::version_text("comm_churn"),
                       "print the version (and git describe of the source) and exit");
  int n = 1000, runs = 5;
  std::string only;
  app.add_option("-n,--comms", n, "communicators per run")->check(CLI::PositiveNumber);
  app.add_option("-r,--runs", runs, "runs of each (medians are reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--only", only, "time one side only (profiling)")
      ->check(CLI::IsMember({"pmpi", "skipring"}));
  CLI11_PARSE(app, argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (skipring_init() != MPI_SUCCESS) {
    MPI_Finalize();
    return 1;
  }
  // Warm-up: the first skipring communicator per process sets up what later ones reuse.
  if (churn(10, true) < 0 || churn(10, false) < 0) {
    if (rank == 0) std::fprintf(stderr, "comm_churn: an MPI call failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::vector<double> pmpi, sr;
  for (int r = 0; r < runs; ++r) {
    const double p = only == "skipring" ? 1 : churn(n, false);
    const double s = only == "pmpi" ? 1 : churn(n, true);
    if (p < 0 || s < 0) {
      if (rank == 0) std::fprintf(stderr, "comm_churn: an MPI call failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    pmpi.push_back(p);
    sr.push_back(s);
    if (rank == 0) {
      std::printf("run %d: pmpi %.2f us/comm, skipring %.2f us/comm\n", r, p * 1e6, s * 1e6);
    }
  }
  if (rank == 0) {
    const double p = median(pmpi), s = median(sr);
    std::printf(
        "np %d, %d communicators x %d runs: pmpi %.2f us/comm, skipring %.2f us/comm, "
        "ratio %.2f\n",
        size, n, runs, p * 1e6, s * 1e6, s / p);
  }
  MPI_Finalize();
  return 0;
}
