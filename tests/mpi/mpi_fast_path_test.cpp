// The `mpi` row's front path (issue 40, runtime/api_allreduce.cpp): once auto has handed a size
// to the MPI library's all-reduce, a repeat of the same call (communicator, type, op, count)
// skips the full checks. This checks that it gives the answers and the argument errors of the
// full path, and that it is left whenever what decided it changes: buffers that overlap or
// alias, a forced algorithm, a nonblocking all-reduce still running on the communicator, and a
// freed communicator whose handle MPI hands out again (the ASan build runs this too: a stale
// state pointer would be a use after free). Prints "N passed, M failed"; exits 77 (skipped)
// when auto picks no `mpi` for 8 bytes on three fresh communicators (its probe decides). With
// --pmpi the same through MPI_Allreduce / MPI_Iallreduce, for a run with libskipring_pmpi.so
// preloaded (the drop-in tries the front path before its own checks; errors return, as the
// communicators' error handler is MPI_ERRORS_RETURN).
//
//   mpirun -np 2 mpi_fast_path_test [--pmpi]
#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;

// skipring's C API, or (--pmpi) the MPI functions the preloaded drop-in defines.
int (*g_allreduce)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm) = skipring_allreduce;
int (*g_iallreduce)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm,
                    MPI_Request*) = skipring_iallreduce;
using mpitest::g_rank;
using mpitest::g_size;

std::string algo_of(MPI_Comm comm) {
  skipring_stats_t st{};
  if (skipring_last_stats(comm, &st) != MPI_SUCCESS) return "?";
  return std::string(st.algo, strnlen(st.algo, sizeof(st.algo)));
}

skipring_stats_t stats_of(MPI_Comm comm) {
  skipring_stats_t st{};
  check(skipring_last_stats(comm, &st) == MPI_SUCCESS, "skipring_last_stats failed");
  return st;
}

uint64_t mpi_counter() {
  uint64_t v = 0;
  skipring_get_counter("mpi", &v);
  return v;
}

// Sum over the ranks of (rank + k): what every all-reduce below must give.
double expected(int k) { return g_size * (g_size - 1) / 2.0 + static_cast<double>(g_size) * k; }

// One all-reduce of one double through the C API; its result checked.
void sum_one(MPI_Comm comm, int k, const std::string& what) {
  double in = g_rank + k, out = -1;
  const int rc = g_allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, comm);
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
  check(out == expected(k), what + ": got " + std::to_string(out));
}

// A fresh duplicate of MPI_COMM_WORLD on which auto hands one double to the MPI library.
MPI_Comm comm_with_mpi_row() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (int k = 0; k < 4; ++k) sum_one(comm, k, "warm-up");
    int mine = algo_of(comm) == "mpi" ? 1 : 0, all = 0;
    mpitest::allreduce(&mine, &all, 1, MPI_INT, MPI_MIN);
    if (all == 1) return comm;
    MPI_Comm_free(&comm);
  }
  return MPI_COMM_NULL;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--pmpi") {
      g_allreduce = MPI_Allreduce;
      g_iallreduce = MPI_Iallreduce;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm comm = comm_with_mpi_row();
  if (comm == MPI_COMM_NULL) {
    if (g_rank == 0) std::printf("SKIPPED: auto chose no `mpi` for 8 bytes on 3 communicators\n");
    MPI_Finalize();
    return 77;
  }

  // Repeats: every one answered right, every one counted as the `mpi` row's.
  const uint64_t before = mpi_counter();
  for (int k = 0; k < 200; ++k) sum_one(comm, k, "repeat " + std::to_string(k));
  check(mpi_counter() - before == 200,
        "200 repeats, `mpi` counter grew by " + std::to_string(mpi_counter() - before));
  check(algo_of(comm) == "mpi", "repeats: last algorithm " + algo_of(comm));

  // In place, then the out-of-place entry again.
  double io = g_rank + 7;
  check(g_allreduce(MPI_IN_PLACE, &io, 1, MPI_DOUBLE, MPI_SUM, comm) == MPI_SUCCESS &&
            io == expected(7),
        "in place: got " + std::to_string(io));
  sum_one(comm, 8, "after in place");

  // The full path's buffer errors, raised on the cached call too (no communication happens:
  // every rank gets the error locally and the communicator stays usable).
  alignas(16) unsigned char raw[32] = {};
  void* buf = raw;
  void* shifted = raw + 4;  // overlaps buf's 8 bytes
  struct BadBuffers {
    const void* send;
    void* recv;
    const char* what;
  };
  const BadBuffers bad[] = {{buf, shifted, "overlapping buffers"},
                            {buf, buf, "aliased buffers"},
                            {buf, MPI_IN_PLACE, "recvbuf MPI_IN_PLACE"},
                            {buf, nullptr, "recvbuf NULL"}};
  for (const BadBuffers& b : bad) {
    check(g_allreduce(b.send, b.recv, 1, MPI_DOUBLE, MPI_SUM, comm) == MPI_ERR_BUFFER,
          std::string(b.what) + ": not MPI_ERR_BUFFER");
  }
  sum_one(comm, 9, "after the buffer errors");

  // The stats of front-path calls (built on demand from the communicator's front line): each
  // call one sequence number, its bytes, no time; the skipring path's calls continue the count.
  const skipring_stats_t s0 = stats_of(comm);
  for (int k = 0; k < 3; ++k) sum_one(comm, 20 + k, "stats repeat");
  const skipring_stats_t s1 = stats_of(comm);
  check(s1.seq == s0.seq + 3 && s1.bytes == sizeof(double) && s1.time_s == 0 && s1.skips == 0,
        "front-path stats: seq " + std::to_string(s0.seq) + " -> " + std::to_string(s1.seq) +
            ", bytes " + std::to_string(s1.bytes) + ", time " + std::to_string(s1.time_s));
  check(stats_of(comm).seq == s1.seq, "asking twice changed the stats");

  // A forced algorithm leaves the front path, auto takes it again.
  check(skipring_set_algo("ring") == MPI_SUCCESS, "set_algo ring");
  sum_one(comm, 10, "forced ring");
  check(algo_of(comm) == "ring", "forced ring: last algorithm " + algo_of(comm));
  const skipring_stats_t s2 = stats_of(comm);
  check(s2.seq == s1.seq + 1 && s2.time_s > 0, "forced ring after front calls: seq " +
                                                   std::to_string(s2.seq) + ", time " +
                                                   std::to_string(s2.time_s));
  check(skipring_set_algo(nullptr) == MPI_SUCCESS, "set_algo back");
  sum_one(comm, 11, "auto again");
  check(algo_of(comm) == "mpi", "auto again: last algorithm " + algo_of(comm));
  sum_one(comm, 12, "auto again, a repeat");
  check(stats_of(comm).seq == s2.seq + 2, "auto again: seq " + std::to_string(stats_of(comm).seq));

  // A nonblocking all-reduce still running on the communicator (the progress thread, under
  // MPI_THREAD_MULTIPLE): the blocking call must wait for it (MPI orders collectives per
  // communicator), not hand itself to the MPI library beside it.
  if (provided == MPI_THREAD_MULTIPLE) {
    std::vector<double> big(1 << 17, g_rank + 1.0), big_out(big.size(), 0);
    MPI_Request req = MPI_REQUEST_NULL;
    check(g_iallreduce(big.data(), big_out.data(), static_cast<int>(big.size()), MPI_DOUBLE,
                       MPI_SUM, comm, &req) == MPI_SUCCESS,
          "iallreduce started");
    sum_one(comm, 12, "blocking behind a nonblocking call");
    check(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "iallreduce waited for");
    const double want = g_size * (g_size + 1) / 2.0;
    bool right = true;
    for (double v : big_out) right = right && v == want;
    check(right, "iallreduce result");
    sum_one(comm, 13, "after the nonblocking call");
  }

  // Freed, and the handle (usually the same value) handed out again: the cached state is gone.
  const MPI_Comm old = comm;
  MPI_Comm_free(&comm);
  MPI_Comm again;
  MPI_Comm_dup(MPI_COMM_WORLD, &again);
  MPI_Comm_set_errhandler(again, MPI_ERRORS_RETURN);
  skipring_totals_t t0{}, t1{};
  skipring_get_totals(&t0);
  for (int k = 14; k < 20; ++k) sum_one(again, k, "new communicator " + std::to_string(k));
  skipring_get_totals(&t1);
  // Counted on the new communicator's state (a stale entry would count them on the freed one,
  // which the totals no longer see), and that state exists.
  check(t1.calls - t0.calls == 6,
        "new communicator: 6 calls counted as " + std::to_string(t1.calls - t0.calls));
  check(algo_of(again) != "?", "new communicator: no state");
  if (g_rank == 0 && again == old) std::printf("the freed handle was reused\n");
  MPI_Comm_free(&again);

  int pending = 0;
  skipring_pending_messages(MPI_COMM_WORLD, &pending);
  check(pending == 0, "nothing left on the internal communicator");
  long counts[2] = {mpitest::g_passed, mpitest::g_failed}, sums[2] = {0, 0};
  mpitest::allreduce(counts, sums, 2, MPI_LONG, MPI_SUM);
  if (g_rank == 0) std::printf("%ld passed, %ld failed\n", sums[0], sums[1]);
  MPI_Finalize();
  return sums[1] == 0 ? 0 : 1;
}
