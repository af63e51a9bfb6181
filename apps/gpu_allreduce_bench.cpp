// skipring_allreduce on CUDA device buffers (the staged path: copied through pinned host
// buffers, reduced by the host collective, copied back; docs/gpu.md) against the same call on
// host buffers, float32 SUM on MPI_COMM_WORLD, for each size. Built only with CUDA
// (SKIPRING_WITH_CUDA); scripts/gpu_check.sh runs it under mpirun (np 2 sharing one GPU is
// fine: each rank takes the GPU local rank modulo the host's GPUs).
//
// Each sample: barrier, one call, the slowest rank's time (MPI_MAX); the median of --runs
// samples after one warm-up call, which is also checked against the exact sum (small integers)
// on every rank. Device calls must be skipring's own (skipring_get_totals: no fallback), else
// the staged path was not taken and the program fails. GB/s = buffer bytes / time.
// --fastest adds the fastest rank's time per call (MPI_MIN, median over the calls) for host and
// device buffers: with a straggler injected (SKIPRING_INJECT), the time of the ranks that were
// on time, which skip-ahead shortens while the slowest rank's time includes the delay.
//
// Output (rank 0): a Markdown table, then "gpu_allreduce_bench: OK". Exit status: 0 OK, 1 error
// (MPI or CUDA call failed, wrong result, device calls fell back), 77 no CUDA device.
#include <cuda_runtime.h>
#include <mpi.h>
#include <skipring/skipring.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "apps/app_version.h"

namespace {

int g_rank = 0;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "gpu_allreduce_bench (rank %d): %s\n", g_rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

#define CHECK_CUDA(expr)                                                      \
  do {                                                                        \
    const cudaError_t err_ = (expr);                                          \
    if (err_ != cudaSuccess) {                                                \
      fail(std::string(#expr) + " failed: " + cudaGetErrorName(err_) + " (" + \
           cudaGetErrorString(err_) + ")");                                   \
    }                                                                         \
  } while (0)

bool parse_sizes(const std::string& text, std::vector<size_t>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > 4096) return false;
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The input of `rank` at element i, and the exact sum over `ranks` ranks (small integers).
float input(int rank, size_t i) { return static_cast<float>((i % 1000) * (rank + 1)); }
float expected(int ranks, size_t i) {
  return static_cast<float>((i % 1000) * static_cast<size_t>(ranks) * (ranks + 1) / 2);
}

void check(const std::vector<float>& got, size_t n, int ranks, const char* kind, size_t mib) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != expected(ranks, i)) {
      fail(std::string(kind) + " buffers, " + std::to_string(mib) + " MiB: element " +
           std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
           std::to_string(expected(ranks, i)));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (skipring_apps::print_version_if_asked(argc, argv, "gpu_allreduce_bench")) return 0;
  MPI_Init(&argc, &argv);
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<size_t> sizes_mib = {1, 4, 16, 64, 256};
  int runs = 7;
  bool fastest = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--sizes-mib" && v && parse_sizes(v, &sizes_mib)) {
      ++i;
    } else if (a == "--runs" && v && std::atoi(v) >= 1 && std::atoi(v) <= 1000) {
      runs = std::atoi(v);
      ++i;
    } else if (a == "--fastest") {
      fastest = true;
    } else {
      if (g_rank == 0) {
        std::fprintf(stderr,
                     "usage: mpirun -np N gpu_allreduce_bench [--sizes-mib 1,4,16,64,256]"
                     " [--runs 7] [--fastest]\n");
      }
      MPI_Finalize();
      return 1;
    }
  }
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    if (g_rank == 0) {
      std::printf("gpu_allreduce_bench: SKIPPED: no CUDA device (%s)\n",
                  probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    }
    MPI_Finalize();
    return 77;
  }
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  CHECK_CUDA(cudaSetDevice(local_rank % devices));
  // CUDA is initialised (a context exists) before skipring first looks at a pointer.
  const size_t max_mib = *std::max_element(sizes_mib.begin(), sizes_mib.end());
  const size_t max_n = (max_mib << 20) / sizeof(float);
  float *dsend = nullptr, *drecv = nullptr;
  CHECK_CUDA(cudaMalloc(&dsend, max_n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&drecv, max_n * sizeof(float)));
  std::vector<float> hsend(max_n), hrecv(max_n);
  for (size_t i = 0; i < max_n; ++i) hsend[i] = input(g_rank, i);
  CHECK_CUDA(cudaMemcpy(dsend, hsend.data(), max_n * sizeof(float), cudaMemcpyHostToDevice));
  if (skipring_init() != MPI_SUCCESS) fail("skipring_init failed (see the log above)");

  // One call, timed on every rank: the slowest rank's seconds for the call and for what it
  // spent outside the collective (skipring_last_stats times the collective only: for device
  // buffers the rest is the staging copies); the algorithm that ran in *algo.
  struct Sample {
    double call_s, outside_s, fastest_s;
  };
  auto timed_call = [&](const void* send, void* recv, size_t n, std::string* algo = nullptr) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    const int rc =
        skipring_allreduce(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double t = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS) fail("skipring_allreduce returned " + std::to_string(rc));
    // Without stats (none recorded for this call) the copies column says n/a (-1).
    skipring_stats_t st{};
    const bool have_stats = skipring_last_stats(MPI_COMM_WORLD, &st) == MPI_SUCCESS;
    if (algo != nullptr) *algo = have_stats ? st.algo : "?";
    // One MPI_MAX for all three: the fastest rank's time is -max(-t).
    double mine[3] = {t, have_stats ? std::max(0.0, t - st.time_s) : -1e9, -t};
    double most[3] = {0, 0, 0};
    MPI_Allreduce(mine, most, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return Sample{most[0], most[1], -most[2]};
  };

  if (g_rank == 0) {
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, local_rank % devices));
    std::printf(
        "%d ranks, %d GPU(s) on rank 0's host (%s); float32 SUM on MPI_COMM_WORLD; median "
        "of %d calls (the slowest rank's time each)\n\n",
        ranks, devices, prop.name, runs);
    std::printf(
        "| MiB | algorithm | host buffers ms | host GB/s | device buffers (staged) ms | "
        "of which copies ms | device GB/s | device / host time |%s\n"
        "|---|---|---|---|---|---|---|---|%s\n",
        fastest ? " host fastest rank ms | device fastest rank ms |" : "",
        fastest ? "---|---|" : "");
  }
  for (const size_t mib : sizes_mib) {
    const size_t n = (mib << 20) / sizeof(float);
    // Host buffers: warm-up and check, then the samples.
    std::fill(hrecv.begin(), hrecv.begin() + static_cast<long>(n), -1.0f);
    timed_call(hsend.data(), hrecv.data(), n);
    check(hrecv, n, ranks, "host", mib);
    std::vector<double> host_s, dev_s, copies_s, host_fast_s, dev_fast_s;
    std::string host_algo, dev_algo;
    for (int r = 0; r < runs; ++r) {
      const Sample s = timed_call(hsend.data(), hrecv.data(), n, &host_algo);
      host_s.push_back(s.call_s);
      host_fast_s.push_back(s.fastest_s);
    }
    // Device buffers: the same, and every call must be skipring's (staged), none a fallback.
    skipring_totals_t before{}, after{};
    skipring_get_totals(&before);
    CHECK_CUDA(cudaMemset(drecv, 0xFF, n * sizeof(float)));
    timed_call(dsend, drecv, n);
    CHECK_CUDA(cudaMemcpy(hrecv.data(), drecv, n * sizeof(float), cudaMemcpyDeviceToHost));
    check(hrecv, n, ranks, "device", mib);
    for (int r = 0; r < runs; ++r) {
      const Sample s = timed_call(dsend, drecv, n, &dev_algo);
      dev_s.push_back(s.call_s);
      copies_s.push_back(s.outside_s);
      dev_fast_s.push_back(s.fastest_s);
    }
    skipring_get_totals(&after);
    if (after.fallbacks != before.fallbacks || after.calls - before.calls != uint64_t(runs + 1)) {
      fail("device-buffer calls were not staged: " + std::to_string(after.calls - before.calls) +
           " skipring calls, " + std::to_string(after.fallbacks - before.fallbacks) +
           " fallbacks (skipring_info says why: the device path's status)");
    }
    if (g_rank == 0) {
      const double h = median(host_s), d = median(dev_s);
      const double bytes = static_cast<double>(n * sizeof(float));
      const std::string algo = host_algo == dev_algo ? host_algo : host_algo + " / " + dev_algo;
      const double copies = median(copies_s);
      char copies_text[32] = "n/a";
      if (copies >= 0) std::snprintf(copies_text, sizeof(copies_text), "%.2f", copies * 1e3);
      std::printf("| %zu | %s | %.2f | %.1f | %.2f | %s | %.1f | %.2f |", mib, algo.c_str(),
                  h * 1e3, bytes / h / 1e9, d * 1e3, copies_text, bytes / d / 1e9, d / h);
      if (fastest) {
        std::printf(" %.2f | %.2f |", median(host_fast_s) * 1e3, median(dev_fast_s) * 1e3);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (g_rank == 0) {
    std::printf(
        "\ngpu_allreduce_bench: OK (every result exact; every device-buffer call staged, "
        "no fallback)\n");
  }
  cudaFree(dsend);
  cudaFree(drecv);
  MPI_Finalize();
  return 0;
}
