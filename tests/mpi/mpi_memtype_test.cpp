// Device buffers never reach skipring's CPU code (issue 14, "memory types, safe first"). This
// machine has no GPU, so a test hook (runtime/memtype.h) makes chosen host buffers look like
// CUDA device or managed memory: without a device path (no CUDA device, or
// SKIPRING_GPU_STAGING=0) every collective given one must go to PMPI, counted as a fallback
// (skipring's own call count unchanged), with the right result; where a device path exists
// (CUDA with a device) they are staged and counted as skipring calls (mpi_staging_test covers
// staging with a fake device). The same calls on buffers that look like host or pinned host
// memory run in skipring. Every rank classifies its buffers alike (as CUDA-aware applications
// do). Prints "N passed, M failed".
#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device_ops.h"
#include "runtime/memtype.h"
#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;
using skipring::MemType;

MemType g_pretend = MemType::kDevice;  // what the buffers below look like
std::vector<const void*> g_marked;     // buffers that look like g_pretend

MemType hook(const void* p) {
  for (const void* m : g_marked) {
    if (m == p) return g_pretend;
  }
  return MemType::kHost;
}

skipring_totals_t totals() {
  skipring_totals_t t{};
  skipring_get_totals(&t);
  return t;
}

constexpr int kCount = 4096;

// Runs the five collectives on marked buffers; expects them in PMPI (`device`) or in skipring.
void run_all(bool device, const std::string& label) {
  std::vector<int64_t> in(kCount), out(kCount, -1), block(kCount / g_size + 1, -1);
  std::vector<int64_t> all(static_cast<size_t>(kCount) * g_size, -1), bc(kCount, -1);
  for (int i = 0; i < kCount; ++i) in[i] = static_cast<int64_t>(i) * 1000003 + g_rank;
  g_marked = {in.data(), out.data(), block.data(), all.data(), bc.data()};
  const int per = kCount / g_size;
  int64_t sum_ranks = 0;
  for (int r = 0; r < g_size; ++r) sum_ranks += r;
  auto expect_sum = [&](int64_t i) { return g_size * i * 1000003 + sum_ranks; };

  const skipring_totals_t t0 = totals();
  check(skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        label + ": allreduce returns MPI_SUCCESS");
  bool good = true;
  for (int i = 0; i < kCount; ++i) good = good && out[i] == expect_sum(i);
  check(good, label + ": allreduce result");
  check(skipring_reduce_scatter_block(in.data(), block.data(), per, MPI_INT64_T, MPI_SUM,
                                      MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": reduce_scatter_block returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < per; ++i) good = good && block[i] == expect_sum(g_rank * per + i);
  check(good, label + ": reduce_scatter_block result");
  check(skipring_allgather(in.data(), kCount, MPI_INT64_T, all.data(), kCount, MPI_INT64_T,
                           MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": allgather returns MPI_SUCCESS");
  good = true;
  for (int r = 0; r < g_size; ++r) {
    for (int i = 0; i < kCount; ++i) {
      good =
          good && all[static_cast<size_t>(r) * kCount + i] == static_cast<int64_t>(i) * 1000003 + r;
    }
  }
  check(good, label + ": allgather result");
  if (g_rank == 0) bc = in;
  g_marked.push_back(bc.data());
  check(skipring_bcast(bc.data(), kCount, MPI_INT64_T, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": bcast returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < kCount; ++i) good = good && bc[i] == static_cast<int64_t>(i) * 1000003;
  check(good, label + ": bcast result");
  std::fill(out.begin(), out.end(), -1);
  check(skipring_reduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        label + ": reduce returns MPI_SUCCESS");
  if (g_rank == 0) {
    good = true;
    for (int i = 0; i < kCount; ++i) good = good && out[i] == expect_sum(i);
    check(good, label + ": reduce result at the root");
  }
  const skipring_totals_t t1 = totals();
  const uint64_t calls = t1.calls - t0.calls, fallbacks = t1.fallbacks - t0.fallbacks;
  if (device && skipring::device_ops() == nullptr) {
    check(fallbacks == 5 && calls == 0, label + ": all 5 calls went to PMPI (fallbacks " +
                                            std::to_string(fallbacks) + ", skipring calls " +
                                            std::to_string(calls) + ")");
  } else {
    check(fallbacks == 0 && calls == 5, label + ": all 5 calls ran in skipring (fallbacks " +
                                            std::to_string(fallbacks) + ", skipring calls " +
                                            std::to_string(calls) + ")");
  }
  g_marked.clear();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  skipring::set_memtype_hook(hook);
  g_pretend = MemType::kHost;
  run_all(false, "host buffers");
  g_pretend = MemType::kDevice;
  run_all(true, "device buffers");
  g_pretend = MemType::kManaged;
  run_all(true, "managed buffers");
  g_pretend = MemType::kPinnedHost;
  run_all(false, "pinned host buffers");
  // One device buffer among host ones is enough (here the receive buffer only).
  {
    std::vector<int64_t> in(kCount, g_rank + 1), out(kCount, 0);
    g_pretend = MemType::kDevice;
    g_marked = {out.data()};
    const skipring_totals_t t0 = totals();
    check(skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) ==
                  MPI_SUCCESS &&
              out[kCount - 1] == static_cast<int64_t>(g_size) * (g_size + 1) / 2,
          "device recvbuf only: right result");
    check(totals().fallbacks - t0.fallbacks == (skipring::device_ops() == nullptr ? 1u : 0u),
          "device recvbuf only: a fallback without a device path, staged with one");
    g_marked.clear();
  }
  skipring::set_memtype_hook(nullptr);
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
