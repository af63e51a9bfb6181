// Counts that differ across ranks (issues 39 and 40): rank r calls skipring_allreduce with
// `base * (r + 1)` float elements, for each algorithm forced through skipring_set_algo and for
// auto. Every call must return an error on at least one rank within a bounded time (the
// others may time out: SKIPRING_TIMEOUT is short in the test's environment), no call may write
// past its receive buffer (guard bytes are checked) or corrupt the heap, and a correct call on
// a fresh communicator must work afterwards (not checked under MPICH, where it does not). The
// communicator a mismatch hit is unusable from then on (docs/reliability.md) and is only freed.
//
// Usage: mpi_count_mismatch_test [ALGO ...]  (default: every algorithm auto can pick, then
// auto). Prints "N passed, M failed".
#include <mpi.h>
#include <skipring/skipring.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

// Bounded: well under the ctest timeout, above SKIPRING_TIMEOUT (the watchdog's error).
constexpr double kMaxSeconds = 20;
constexpr size_t kGuard = 1 << 16;  // guard bytes after each receive buffer

bool guard_intact(const std::vector<float>& out, size_t count) {
  const auto* p = reinterpret_cast<const unsigned char*>(out.data() + count);
  const size_t bytes = (out.size() - count) * sizeof(float);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0x5A) return false;
  }
  return true;
}

// One mismatched call on its own communicator, then a correct one on a fresh communicator.
void run_case(const std::string& algo, size_t base) {
  const std::string what = algo + " base " + std::to_string(base);
  if (g_rank == 0) {
    std::printf("case %s\n", what.c_str());
    std::fflush(stdout);
  }
  check(skipring_set_algo(algo.c_str()) == MPI_SUCCESS, what + ": skipring_set_algo");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const size_t count = base * static_cast<size_t>(g_rank + 1);
  std::vector<float> in(count, 1.0f);
  std::vector<float> out(count + kGuard / sizeof(float));
  std::memset(out.data(), 0x5A, out.size() * sizeof(float));
  const auto t0 = std::chrono::steady_clock::now();
  const int rc =
      skipring_allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(took < kMaxSeconds, what + ": returned after " + std::to_string(took) + " s");
  check(guard_intact(out, count), what + ": bytes written past the receive buffer");
  // At least one rank returns an error (the others may too).
  int failed = rc != MPI_SUCCESS ? 1 : 0, any = 0;
  mpitest::allreduce(&failed, &any, 1, MPI_INT, MPI_MAX);
  check(any == 1, what + ": every rank returned MPI_SUCCESS for mismatched counts");
  MPI_Comm_free(&comm);
  mpitest::barrier();

#ifdef MPICH_VERSION
  // Not under MPICH 4.0.2: there the mismatched call's unmatched messages stay pending, and the
  // next communicator's all-reduce timed out in the MPICH tier (docs/reliability.md, "not
  // closed"); the error itself, and no write past a buffer, are checked above.
  return;
#endif
  // A fresh communicator works, exactly.
  MPI_Comm fresh;
  MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
  std::vector<float> a(base, 1.0f + static_cast<float>(g_rank)), b(base, 0.0f);
  const int rc2 =
      skipring_allreduce(a.data(), b.data(), static_cast<int>(base), MPI_FLOAT, MPI_SUM, fresh);
  check(rc2 == MPI_SUCCESS, what + ": the following correct call failed");
  const float want = static_cast<float>(g_size * (g_size + 1) / 2);
  bool exact = true;
  for (float v : b) exact = exact && v == want;
  check(rc2 != MPI_SUCCESS || exact, what + ": the following correct call's result is wrong");
  MPI_Comm_free(&fresh);
  mpitest::barrier();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  std::vector<std::string> algos;
  for (int i = 1; i < argc; ++i) algos.emplace_back(argv[i]);
  if (algos.empty()) {
    algos = {"skipring", "ring", "rd", "rabenseifner", "tree", "multitree", "hier", "auto"};
  }
  // 1000 floats: small (eager) messages; 5000: above Open MPI's shared-memory eager limit
  // (single-copy rendezvous); 40000: split messages (payloads above 16 KiB) in the cores.
  for (const std::string& algo : algos) {
    for (size_t base : {1000, 5000, 40000}) run_case(algo, base);
  }
  skipring_set_algo(nullptr);
  const int code = mpitest::finish();
  MPI_Finalize();
  return code;
}
