// Skip-ahead under mpirun with an injected straggler (SKIPRING_INJECT in the environment):
// repeated ring all-reduces of int64 sums and float sums; integer results must equal
// PMPI_Allreduce exactly, float results must be bitwise identical on every rank and close to
// MPI's; no message may be left on the internal communicator after any collective; and the
// skip counters must be > 0 (--expect-skips) or exactly 0 (--expect-no-skips), summed over
// ranks; with --expect-direct / --expect-routed the last collective's allgather must (not) have
// gone straight from the owners. Prints "N passed, M failed".
#include <mpi.h>
#include <skipring/skipring.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_failed;
using mpitest::g_passed;
using mpitest::g_rank;
using mpitest::g_size;
using mpitest::no_leftovers;
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // Skip-ahead lives in the ring: run it whatever SKIPRING_ALGO=auto would pick for this size.
  check(skipring_set_algo("skipring") == MPI_SUCCESS, "skipring_set_algo");
  bool expect_skips = false, expect_none = false, expect_direct = false, expect_routed = false;
  bool expect_excluded = false;
  int iters = 12;
  size_t count = 1 << 17;  // 1 MiB of int64: the ring, several segments per chunk
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    expect_skips = expect_skips || a == "--expect-skips";
    expect_none = expect_none || a == "--expect-no-skips";
    expect_direct = expect_direct || a == "--expect-direct";
    expect_routed = expect_routed || a == "--expect-routed";
    expect_excluded = expect_excluded || a == "--expect-excluded";
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (a == "--count" && i + 1 < argc) count = std::strtoul(argv[++i], nullptr, 10);
  }
  std::vector<int64_t> in(count), out(count), ref(count);
  std::vector<float> fin(count), fout(count), fref(count);
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < count; ++i) {
      in[i] = static_cast<int64_t>((i * 2654435761u + g_rank * 40503u + it) % 100000) - 50000;
      fin[i] = static_cast<float>(((i * 7 + g_rank * 13 + it) % 1000) / 7.0 - 70.0);
    }
    const bool in_place = it % 2 == 1;
    int rc;
    if (in_place) {
      out = in;
      rc = skipring_allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(count), MPI_INT64_T,
                              MPI_SUM, MPI_COMM_WORLD);
    } else {
      rc = skipring_allreduce(in.data(), out.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                              MPI_COMM_WORLD);
    }
    check(rc == MPI_SUCCESS, "int64 allreduce rc");
    PMPI_Allreduce(in.data(), ref.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                   MPI_COMM_WORLD);
    check(out == ref, "int64 sum equals PMPI_Allreduce, iteration " + std::to_string(it));
    check(no_leftovers(), "no message left after int64 iteration " + std::to_string(it));

    rc = skipring_allreduce(fin.data(), fout.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD);
    check(rc == MPI_SUCCESS, "float allreduce rc");
    PMPI_Allreduce(fin.data(), fref.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD);
    std::vector<float> root = fout;
    PMPI_Bcast(root.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    check(std::memcmp(root.data(), fout.data(), count * sizeof(float)) == 0,
          "float result bitwise identical on every rank, iteration " + std::to_string(it));
    bool close = true;
    for (size_t i = 0; i < count && close; ++i) {
      close = std::fabs(fout[i] - fref[i]) <= 1e-3f * (1 + std::fabs(fref[i]));
    }
    check(close, "float sum close to PMPI_Allreduce, iteration " + std::to_string(it));
    check(no_leftovers(), "no message left after float iteration " + std::to_string(it));
  }
  skipring_stats_t st;
  check(skipring_last_stats(MPI_COMM_WORLD, &st) == MPI_SUCCESS, "last stats");
  if (expect_skips) check(st.skip_threshold_s > 0, "skip threshold reported");
  if (expect_none) check(st.skip_threshold_s == 0, "no threshold with skip-ahead off");
  // The allgather after the straggler (last collective, every rank's view summed): direct from
  // the owners (one host, SKIPRING_DIRECT_ALLGATHER auto or 1) or routed (0).
  uint64_t direct_mine = st.direct_segments, direct_all = 0;
  PMPI_Allreduce(&direct_mine, &direct_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (expect_direct) check(direct_all > 0, "owners sent segments straight to every rank");
  if (expect_routed) check(direct_all == 0, "no direct allgather with it off");
  // The late chain (SKIPRING_LATE_CHAIN): the census took the late rank out on every rank.
  uint64_t excluded_mine = st.late_excluded, excluded_all = 0;
  PMPI_Allreduce(&excluded_mine, &excluded_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (expect_excluded) {
    check(excluded_all == static_cast<uint64_t>(g_size), "every rank saw the late rank taken out");
  }
  skipring_totals_t t;
  skipring_get_totals(&t);
  uint64_t mine[2] = {t.skips, t.late}, all[2] = {0, 0};
  PMPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (expect_skips) check(all[0] > 0, "the straggler made ranks skip ahead");
  if (expect_none) check(all[0] == 0 && all[1] == 0, "no skips and no late pieces");
  long totals[2] = {g_passed, g_failed}, sums[2];
  PMPI_Allreduce(totals, sums, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("skips=%llu late=%llu\n", static_cast<unsigned long long>(all[0]),
                static_cast<unsigned long long>(all[1]));
    std::printf("excluded=%llu\n", static_cast<unsigned long long>(excluded_all));
    std::printf("%ld passed, %ld failed\n", sums[0], sums[1]);
  }
  MPI_Finalize();
  return sums[1] == 0 ? 0 : 1;
}
