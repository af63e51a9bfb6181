// The CUDA reduce kernel's bandwidth against cudaMemcpy device to device (issue 14's goal: the
// kernel at >= 80 % of the copy's). Float32 SUM, dst = a + b, on one GPU, for each size (bytes
// per buffer). Built only with CUDA (SKIPRING_WITH_CUDA); scripts/gpu_check.sh runs it.
//
// Bytes counted as in reduce_kernel_bench (the host kernels): a copy of N bytes moves 2 N
// (read N, write N), the reduce 3 N (read a and b, write dst); GB/s = counted bytes / time.
// Each sample times a batch of back-to-back launches on one stream with CUDA events (the batch
// is longer for small sizes, so launch gaps do not dominate); copy and reduce samples
// alternate; the median of --runs samples is reported. The result of the reduce is checked
// against the host's sum (exact: small integers). The goal is judged at the sizes of at least
// --goal-min-mib (default 64 MiB: three buffers then exceed the 50 MiB L2 of an H100/H200, so
// both run from device memory); smaller sizes are reported too.
//
// Output: a Markdown table on stdout, then one line "gpu_reduce_bench: goal ... met|NOT met".
// Exit status: 0 goal met, 3 goal not met, 1 error (CUDA call failed, wrong result, bad
// argument), 77 no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "apps/app_version.h"
#include "collectives/dtype.h"
#include "runtime/cuda/cuda_reduce.h"

namespace {

#define CHECK_CUDA(expr)                                                    \
  do {                                                                      \
    const cudaError_t err_ = (expr);                                        \
    if (err_ != cudaSuccess) {                                              \
      std::fprintf(stderr, "gpu_reduce_bench: %s failed: %s (%s)\n", #expr, \
                   cudaGetErrorName(err_), cudaGetErrorString(err_));       \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

struct Options {
  std::vector<size_t> sizes_mib = {1, 4, 16, 64, 256};
  int runs = 9;
  double goal = 0.80;
  size_t goal_min_mib = 64;
};

bool parse_sizes(const std::string& text, std::vector<size_t>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > 16384) return false;
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--version") {
      std::printf("%s\n", skipring_apps::version_text("gpu_reduce_bench").c_str());
      std::exit(0);
    } else if (a == "--sizes-mib" && v) {
      if (!parse_sizes(v, &o->sizes_mib)) return false;
      ++i;
    } else if (a == "--runs" && v) {
      o->runs = std::atoi(v);
      if (o->runs < 1 || o->runs > 1000) return false;
      ++i;
    } else if (a == "--goal" && v) {
      o->goal = std::atof(v);
      if (!(o->goal > 0 && o->goal <= 10)) return false;
      ++i;
    } else if (a == "--goal-min-mib" && v) {
      o->goal_min_mib = std::strtoul(v, nullptr, 10);
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_args(argc, argv, &opt)) {
    std::fprintf(stderr,
                 "usage: gpu_reduce_bench [--sizes-mib 1,4,16,64,256] [--runs 9] [--goal 0.8] "
                 "[--goal-min-mib 64]\n");
    return 1;
  }
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::printf("gpu_reduce_bench: SKIPPED: no CUDA device (%s)\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const size_t max_mib = *std::max_element(opt.sizes_mib.begin(), opt.sizes_mib.end());
  const size_t max_floats = (max_mib << 20) / sizeof(float);
  float *a = nullptr, *b = nullptr, *d = nullptr;
  CHECK_CUDA(cudaMalloc(&a, max_floats * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&b, max_floats * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d, max_floats * sizeof(float)));
  {
    std::vector<float> ha(max_floats), hb(max_floats);
    for (size_t i = 0; i < max_floats; ++i) {
      ha[i] = static_cast<float>(i % 1000);
      hb[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    }
    CHECK_CUDA(cudaMemcpy(a, ha.data(), max_floats * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(b, hb.data(), max_floats * sizeof(float), cudaMemcpyHostToDevice));
  }
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));

  std::printf("GPU 0: %s (sm_%d%d), %d device(s); float32 SUM dst = a + b; median of %d runs\n\n",
              prop.name, prop.major, prop.minor, devices, opt.runs);
  std::printf(
      "| MiB per buffer | launches per sample | cudaMemcpy D2D GB/s | reduce GB/s | "
      "reduce / memcpy |\n|---|---|---|---|---|\n");
  bool goal_met = true;
  double worst = 1e9;
  int judged = 0;
  for (const size_t mib : opt.sizes_mib) {
    const size_t bytes = mib << 20;
    const size_t n = bytes / sizeof(float);
    const int batch = static_cast<int>(std::max<size_t>(3, 3 * (size_t{64} / mib)));
    // Seconds per operation of one batch.
    auto sample = [&](bool reduce) {
      CHECK_CUDA(cudaEventRecord(t0, stream));
      for (int r = 0; r < batch; ++r) {
        if (reduce) {
          int err = 0;
          if (skipring::cuda::reduce_async(skipring::ROp::kSum, skipring::DType::kFloat, d, a, b, n,
                                           stream, &err) != skipring::Status::kOk) {
            std::fprintf(stderr, "gpu_reduce_bench: reduce launch failed: %s\n",
                         cudaGetErrorString(static_cast<cudaError_t>(err)));
            std::exit(1);
          }
        } else {
          CHECK_CUDA(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, stream));
        }
      }
      CHECK_CUDA(cudaEventRecord(t1, stream));
      CHECK_CUDA(cudaEventSynchronize(t1));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      return ms / 1e3 / batch;
    };
    sample(false);  // warm-up
    sample(true);
    std::vector<double> copy_s, reduce_s;
    for (int r = 0; r < opt.runs; ++r) {
      copy_s.push_back(sample(false));
      reduce_s.push_back(sample(true));
    }
    // The last operation was a reduce: check it (exact in float: small integers).
    std::vector<float> got(n);
    CHECK_CUDA(cudaMemcpy(got.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      const float want =
          static_cast<float>(i % 1000) + static_cast<float>(static_cast<int>(i % 7) - 3);
      if (got[i] != want) {
        std::fprintf(stderr, "gpu_reduce_bench: wrong sum at %zu MiB, element %zu: %g, want %g\n",
                     mib, i, static_cast<double>(got[i]), static_cast<double>(want));
        return 1;
      }
    }
    const double copy_gbs = 2.0 * static_cast<double>(bytes) / median(copy_s) / 1e9;
    const double reduce_gbs = 3.0 * static_cast<double>(bytes) / median(reduce_s) / 1e9;
    const double ratio = reduce_gbs / copy_gbs;
    if (mib >= opt.goal_min_mib) {
      ++judged;
      worst = std::min(worst, ratio);
      goal_met = goal_met && ratio >= opt.goal;
    }
    std::printf("| %zu | %d | %.1f | %.1f | %.0f %%%s |\n", mib, batch, copy_gbs, reduce_gbs,
                100 * ratio, mib >= opt.goal_min_mib ? "" : " (not judged: fits in L2)");
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  if (judged == 0) {
    std::printf("\ngpu_reduce_bench: goal >= %.0f %% not judged (no size >= %zu MiB)\n",
                100 * opt.goal, opt.goal_min_mib);
    return 0;
  }
  std::printf(
      "\ngpu_reduce_bench: goal reduce >= %.0f %% of cudaMemcpy D2D at sizes >= %zu MiB: "
      "%s (lowest %.0f %%)\n",
      100 * opt.goal, opt.goal_min_mib, goal_met ? "met" : "NOT met", 100 * worst);
  return goal_met ? 0 : 3;
}
