// Google Benchmark for the reduction kernels: float SUM (dst = a + b and dst += b), double
// SUM and int32 BXOR on large arrays, next to memcpy of the same array size.
//
// Byte-counting convention (identical for every benchmark here): bytes/s counts the bytes
// the operation logically reads plus the bytes it writes, per iteration, for an array of
// N bytes (the benchmark argument):
//   memcpy(dst, src, N)       reads N,  writes N  -> 2 N
//   dst = a op b              reads 2N, writes N  -> 3 N
//   dst = dst op b (in place) reads 2N, writes N  -> 3 N
// Cache write-allocate traffic (reading dst lines before writing them) is not counted for
// either, so "reduce bytes/s / memcpy bytes/s" compares effective memory throughput.
// Results are reported against real (wall-clock) time. Example:
//   reduce_kernel_bench --benchmark_filter='Float|Memcpy' --benchmark_repetitions=5
//                       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "apps/app_version.h"
#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "common/status.h"

namespace {

using skipring::DType;
using skipring::ROp;
using skipring::Status;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// Page-aligned buffer whose pages are all touched before timing starts.
Buffer make_buffer(size_t bytes, unsigned char fill) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  Buffer b(static_cast<unsigned char*>(std::aligned_alloc(4096, rounded)));
  if (b) std::memset(b.get(), fill, rounded);
  return b;
}

template <typename T>
void fill_values(unsigned char* p, size_t bytes, T value) {
  T* t = reinterpret_cast<T*>(p);
  for (size_t i = 0; i < bytes / sizeof(T); ++i) t[i] = value;
}

void set_bytes(benchmark::State& state, size_t bytes_per_iteration, size_t array_bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes_per_iteration));
  state.counters["array_MiB"] = static_cast<double>(array_bytes) / (1024.0 * 1024.0);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Buffer src = make_buffer(bytes, 1);
  Buffer dst = make_buffer(bytes, 2);
  if (!src || !dst) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * bytes, bytes);
}

// dst = a op b (three distinct arrays) or, with in_place, dst = dst op b.
template <typename T, ROp kOp, DType kT, bool kInPlace>
void BM_Reduce(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sizeof(T);
  Buffer a = make_buffer(bytes, 0);
  Buffer b = make_buffer(bytes, 0);
  Buffer d = kInPlace ? nullptr : make_buffer(bytes, 0);
  if (!a || !b || (!kInPlace && !d)) {
    state.SkipWithError("out of memory");
    return;
  }
  // Small, normal values: repeated in-place sums stay finite and never become subnormal.
  fill_values<T>(a.get(), bytes, static_cast<T>(1));
  fill_values<T>(b.get(), bytes, static_cast<T>(3));
  void* dst = kInPlace ? static_cast<void*>(a.get()) : static_cast<void*>(d.get());
  for (auto _ : state) {
    const Status st = skipring::reduce(kOp, kT, dst, a.get(), b.get(), count);
    if (st != Status::kOk) {
      state.SkipWithError("reduce failed");
      break;
    }
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 3 * count * sizeof(T), bytes);
}

// Array sizes in bytes: cache-resident (32 KiB, 256 KiB) and 1 MiB ... 256 MiB.
void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes");
  b->Arg(32 << 10)->Arg(256 << 10);
  for (int64_t mib = 1; mib <= 256; mib *= 4) b->Arg(mib << 20);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Memcpy)->Apply(Sizes);
BENCHMARK(BM_Reduce<float, ROp::kSum, DType::kFloat, false>)
    ->Name("BM_FloatSum/dst=a+b")
    ->Apply(Sizes);
BENCHMARK(BM_Reduce<float, ROp::kSum, DType::kFloat, true>)
    ->Name("BM_FloatSum/dst+=b")
    ->Apply(Sizes);
BENCHMARK(BM_Reduce<double, ROp::kSum, DType::kDouble, false>)
    ->Name("BM_DoubleSum/dst=a+b")
    ->Apply(Sizes);
BENCHMARK(BM_Reduce<int32_t, ROp::kBxor, DType::kInt32, false>)
    ->Name("BM_Int32Bxor/dst=a^b")
    ->Apply(Sizes);

}  // namespace

// BENCHMARK_MAIN() with --version (Google Benchmark's own flags have none).
int main(int argc, char** argv) {
  if (skipring_apps::print_version_if_asked(argc, argv, "reduce_kernel_bench")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
