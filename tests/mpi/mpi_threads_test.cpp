// MPI_THREAD_MULTIPLE: several threads per rank, each running all-reduces on its own
// communicator at the same time (skipring.h: one thread at a time per communicator), results
// checked against references computed on the host. CI runs it in the ThreadSanitizer build too
// (scripts/test.sh), where a data race in skipring's shared state (the communicator table, the
// totals, the logger) fails the run.
//
//   mpirun -np 2 mpi_threads_test [--threads K] [--iters N] [--max-count C]
// Exits 77 (ctest: skipped) when the MPI library does not provide MPI_THREAD_MULTIPLE.
#include <mpi.h>
#include <skipring/skipring.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {

// Rank r's input element i in collective k of thread t: small integers, so every sum is exact
// in float and double whatever the order.
int64_t input_value(int t, int k, int r, size_t i) {
  return static_cast<int64_t>((t * 131 + k * 31 + r * 17 + static_cast<int>(i % 1009)) % 97) - 48;
}

struct Outcome {
  long passed = 0, failed = 0;
  std::string first_failure;
};

void note(Outcome* o, bool cond, const std::string& what) {
  if (cond) {
    ++o->passed;
  } else {
    if (o->failed++ == 0) o->first_failure = what;
  }
}

// One thread: `iters` all-reduces of varying sizes and types on `comm`.
void worker(int t, MPI_Comm comm, int iters, size_t max_count, int rank, int size, Outcome* out) {
  static const size_t kCounts[] = {1, 7, 1000, 65536, 262144};
  for (int k = 0; k < iters; ++k) {
    const size_t count =
        std::min(max_count, kCounts[(t + k) % (sizeof kCounts / sizeof kCounts[0])]);
    const bool use_double = (k + t) % 2 == 0;
    const int op_pick = k % 3;  // 0 sum, 1 max, 2 min
    const MPI_Op op = op_pick == 0 ? MPI_SUM : op_pick == 1 ? MPI_MAX : MPI_MIN;
    std::vector<double> dsend(count), drecv(count);
    std::vector<int32_t> isend(count), irecv(count);
    for (size_t i = 0; i < count; ++i) {
      dsend[i] = static_cast<double>(input_value(t, k, rank, i));
      isend[i] = static_cast<int32_t>(input_value(t, k, rank, i));
    }
    const int rc = use_double ? skipring_allreduce(dsend.data(), drecv.data(),
                                                   static_cast<int>(count), MPI_DOUBLE, op, comm)
                              : skipring_allreduce(isend.data(), irecv.data(),
                                                   static_cast<int>(count), MPI_INT, op, comm);
    note(out, rc == MPI_SUCCESS,
         "thread " + std::to_string(t) + " call " + std::to_string(k) + " returned " +
             std::to_string(rc));
    if (rc != MPI_SUCCESS) continue;
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      int64_t want = input_value(t, k, 0, i);
      for (int r = 1; r < size; ++r) {
        const int64_t v = input_value(t, k, r, i);
        want = op_pick == 0 ? want + v : op_pick == 1 ? std::max(want, v) : std::min(want, v);
      }
      const int64_t got = use_double ? static_cast<int64_t>(drecv[i]) : irecv[i];
      if (got != want || (use_double && drecv[i] != static_cast<double>(want))) ++wrong;
    }
    note(out, wrong == 0,
         "thread " + std::to_string(t) + " call " + std::to_string(k) + " (" +
             std::to_string(count) + " elements): " + std::to_string(wrong) + " wrong");
  }
}

// The nonblocking all-reduce's sleeping wait (skipring_block_on_requests): once it returns for
// a request the progress thread ran, the request is complete (MPI_Test says so at once), the
// results are right; MPI_REQUEST_NULL is ignored, bad arguments get their error codes. Sizes
// above the `mpi` row's probe sizes, so the progress thread runs them (not PMPI_Iallreduce).
void block_on_requests_checks(int rank, int size) {
  mpitest::check(skipring_block_on_requests(-1, nullptr) == MPI_ERR_COUNT, "count -1");
  mpitest::check(skipring_block_on_requests(1, nullptr) == MPI_ERR_REQUEST, "NULL requests");
  mpitest::check(skipring_block_on_requests(0, nullptr) == MPI_SUCCESS, "count 0");
  MPI_Request none = MPI_REQUEST_NULL;
  mpitest::check(skipring_block_on_requests(1, &none) == MPI_SUCCESS, "MPI_REQUEST_NULL");
  for (size_t count : {size_t{32768}, size_t{131072}}) {
    std::vector<int64_t> in(count), out0(count, 0), out1(count, 0);
    for (size_t i = 0; i < count; ++i) in[i] = input_value(7, static_cast<int>(count), rank, i);
    MPI_Request reqs[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    const bool started =
        skipring_iallreduce(in.data(), out0.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                            MPI_COMM_WORLD, &reqs[0]) == MPI_SUCCESS &&
        skipring_iallreduce(in.data(), out1.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                            MPI_COMM_WORLD, &reqs[2]) == MPI_SUCCESS;
    mpitest::check(started, "skipring_iallreduce of " + std::to_string(count));
    if (!started) continue;
    mpitest::check(skipring_block_on_requests(3, reqs) == MPI_SUCCESS, "block on two");
    int flags[2] = {0, 0};
    MPI_Test(&reqs[0], &flags[0], MPI_STATUS_IGNORE);
    MPI_Test(&reqs[2], &flags[1], MPI_STATUS_IGNORE);
    mpitest::check(
        flags[0] == 1 && flags[1] == 1,
        "complete once skipring_block_on_requests returned (" + std::to_string(count) + ")");
    if (flags[0] == 0) MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    if (flags[1] == 0) MPI_Wait(&reqs[2], MPI_STATUS_IGNORE);
    bool right = true;
    for (size_t i = 0; i < count && right; ++i) {
      int64_t want = 0;
      for (int r = 0; r < size; ++r) want += input_value(7, static_cast<int>(count), r, i);
      right = out0[i] == want && out1[i] == want;
    }
    mpitest::check(right, "nonblocking results of " + std::to_string(count));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &mpitest::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpitest::g_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (mpitest::g_rank == 0) std::printf("skipped: MPI_THREAD_MULTIPLE not provided\n");
    MPI_Finalize();
    return 77;
  }
  int threads = 3, iters = 20;
  size_t max_count = 262144;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-count") == 0)
      max_count = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  // Communicators are created by the main thread, in the same order on every rank.
  std::vector<MPI_Comm> comms(threads);
  for (auto& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  std::vector<Outcome> outcomes(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(worker, t, comms[t], iters, max_count, mpitest::g_rank, mpitest::g_size,
                      &outcomes[t]);
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    mpitest::g_passed += outcomes[t].passed;
    mpitest::g_failed += outcomes[t].failed;
    if (outcomes[t].failed > 0) {
      std::fprintf(stderr, "rank %d FAIL (%ld failures), first: %s\n", mpitest::g_rank,
                   outcomes[t].failed, outcomes[t].first_failure.c_str());
    }
    int pending = -1;
    mpitest::check(skipring_pending_messages(comms[t], &pending) == MPI_SUCCESS && pending == 0,
                   "thread " + std::to_string(t) + "'s communicator has messages left");
  }
  block_on_requests_checks(mpitest::g_rank, mpitest::g_size);
  // The process-wide totals saw every call of every thread.
  skipring_totals_t totals{};
  mpitest::check(skipring_get_totals(&totals) == MPI_SUCCESS &&
                     totals.calls >= static_cast<uint64_t>(threads) * iters,
                 "totals count every thread's calls");
  for (auto& c : comms) MPI_Comm_free(&c);
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
