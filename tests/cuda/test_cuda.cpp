// GPU tests (issue 14, parts 2 and 5): the CUDA reduce kernels give the host kernels' bits for
// every op x type they handle, every alignment mode and exact aliasing; the CUDA DeviceOps
// copies, reduces, synchronises and reports errors as statuses. (The reduce kernel's bandwidth
// against cudaMemcpy is apps/gpu_reduce_bench.cpp's, run by scripts/gpu_check.sh.)
// Without a CUDA device (or driver) the program prints why and exits 77 (ctest: skipped).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "runtime/cuda/cuda_device_ops.h"
#include "runtime/cuda/cuda_reduce.h"
#include "runtime/device_ops.h"

namespace skipring {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Random bytes, with special values sprinkled in for float and double: NaNs, infinities,
// signed zeros, denormals, so the NaN and zero-sign rules are exercised.
std::vector<uint8_t> make_input(DType t, size_t count, uint32_t seed) {
  const size_t elem = dtype_size(t);
  std::vector<uint8_t> v(count * elem);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  auto put = [&](size_t i, auto x) { std::memcpy(v.data() + i * elem, &x, sizeof(x)); };
  for (size_t i = 0; i < count; ++i) {
    const uint32_t r = rng() % 16;
    if (t == DType::kFloat) {
      const float specials[] = {0.0f,
                                -0.0f,
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::denorm_min(),
                                1.0f,
                                -1.0f};
      if (r < 8)
        put(i, specials[r]);
      else
        put(i, static_cast<float>(static_cast<int32_t>(rng()) % 100000) / 37.0f);
    } else if (t == DType::kDouble) {
      const double specials[] = {0.0,
                                 -0.0,
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::denorm_min(),
                                 1.0,
                                 -1.0};
      if (r < 8)
        put(i, specials[r]);
      else
        put(i, static_cast<double>(static_cast<int32_t>(rng()) % 100000) / 37.0);
    } else if (t == DType::kBool) {
      v[i] = static_cast<uint8_t>(r < 6 ? 0 : r);  // 0, 1 and other "true" bytes
    } else if (r < 3) {
      std::memset(v.data() + i * elem, 0, elem);  // zeros for the logical ops
    }
  }
  return v;
}

// One (op, type, count, byte offset, aliasing) case: device result bytes == host result bytes.
// alias: 0 distinct, 1 dst == a, 2 dst == b.
void check_case(ROp op, DType t, size_t count, size_t offset, int alias) {
  const size_t bytes = count * dtype_size(t);
  const std::vector<uint8_t> a =
      make_input(t, count, 1 + static_cast<uint32_t>(op) * 31 + static_cast<uint32_t>(t));
  const std::vector<uint8_t> b = make_input(t, count, 1000 + static_cast<uint32_t>(t));
  std::vector<uint8_t> expect(bytes);
  ASSERT_EQ(reduce(op, t, expect.data(), a.data(), b.data(), count), Status::kOk);

  uint8_t* da = nullptr;
  uint8_t* db = nullptr;
  uint8_t* dd = nullptr;
  CUDA_OK(cudaMalloc(&da, bytes + 64));
  CUDA_OK(cudaMalloc(&db, bytes + 64));
  CUDA_OK(cudaMalloc(&dd, bytes + 64));
  CUDA_OK(cudaMemcpy(da + offset, a.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db + offset, b.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, 0xA5, bytes + 64));
  uint8_t* dst = alias == 1 ? da + offset : alias == 2 ? db + offset : dd + offset;
  int err = 0;
  ASSERT_EQ(cuda::reduce_async(op, t, dst, da + offset, db + offset, count, nullptr, &err),
            Status::kOk)
      << "cuda error " << err;
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(bytes);
  CUDA_OK(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
  size_t first_bad = bytes;
  for (size_t i = 0; i < bytes && first_bad == bytes; ++i) {
    if (got[i] != expect[i]) first_bad = i;
  }
  EXPECT_EQ(first_bad, bytes) << rop_name(op) << " " << dtype_name(t) << " count " << count
                              << " offset " << offset << " alias " << alias
                              << ": first differing element " << first_bad / dtype_size(t);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
}

TEST(CudaKernels, EveryOpAndTypeMatchesHostBitForBit) {
  int cases = 0;
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    for (int oi = 0; oi < kNumROps; ++oi) {
      const ROp op = static_cast<ROp>(oi);
      if (!cuda::reduce_supported(op, t)) continue;
      const size_t elem = dtype_size(t);
      // 16-byte aligned (vector path with a tail), element-aligned, byte-misaligned.
      for (size_t offset : {size_t{0}, elem, size_t{1}}) {
        for (size_t count : {size_t{1}, size_t{1000003}}) {
          check_case(op, t, count, offset, 0);
          ++cases;
        }
      }
      check_case(op, t, 4099, 0, 1);
      check_case(op, t, 4099, 0, 2);
      cases += 2;
    }
  }
  std::printf("checked %d kernel cases\n", cases);
  EXPECT_GT(cases, 80 * 8);
}

TEST(CudaKernels, RejectsWhatTheDeviceCannotDo) {
  EXPECT_FALSE(cuda::reduce_supported(ROp::kSum, DType::kLongDouble));
  EXPECT_FALSE(cuda::reduce_supported(ROp::kBand, DType::kFloat));
  EXPECT_FALSE(cuda::reduce_supported(ROp::kSum, DType::kBool));
  EXPECT_TRUE(cuda::reduce_supported(ROp::kLand, DType::kBool));
  // Complex and MINLOC/MAXLOC pair types: host kernels only.
  EXPECT_FALSE(cuda::reduce_supported(ROp::kSum, DType::kComplexFloat));
  EXPECT_FALSE(cuda::reduce_supported(ROp::kProd, DType::kComplexDouble));
  EXPECT_FALSE(cuda::reduce_supported(ROp::kMinloc, DType::kDoubleInt));
  EXPECT_FALSE(cuda::reduce_supported(ROp::kMaxloc, DType::kIntInt));
  float x = 0;
  EXPECT_EQ(cuda::reduce_async(ROp::kSum, DType::kComplexFloat, &x, &x, &x, 1, nullptr),
            Status::kErrType);
  EXPECT_EQ(cuda::reduce_async(ROp::kMaxloc, DType::kFloatInt, &x, &x, &x, 1, nullptr),
            Status::kErrType);
  EXPECT_EQ(cuda::reduce_async(ROp::kSum, DType::kLongDouble, &x, &x, &x, 1, nullptr),
            Status::kErrType);
  EXPECT_EQ(cuda::reduce_async(ROp::kBxor, DType::kDouble, &x, &x, &x, 1, nullptr), Status::kErrOp);
  EXPECT_EQ(cuda::reduce_async(ROp::kSum, DType::kFloat, nullptr, &x, &x, 1, nullptr),
            Status::kErrBuffer);
}

TEST(CudaDeviceOps, CopyReduceSync) {
  std::string status;
  DeviceOps* ops = cuda_device_ops(&status);
  ASSERT_NE(ops, nullptr) << status;
  std::printf("%s\n", status.c_str());
  const size_t n = 1 << 20;
  void* pinned = nullptr;
  ASSERT_EQ(ops->alloc_pinned(n * sizeof(int32_t), &pinned), Status::kOk) << ops->last_error();
  DeviceStream* s = nullptr;
  ASSERT_EQ(ops->stream_create(&s), Status::kOk) << ops->last_error();
  auto* h = static_cast<int32_t*>(pinned);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<int32_t>(i);
  int32_t* d = nullptr;
  CUDA_OK(cudaMalloc(&d, n * sizeof(int32_t)));
  ASSERT_EQ(ops->copy_to_device_async(d, h, n * sizeof(int32_t), s), Status::kOk);
  ASSERT_EQ(ops->reduce_async(ROp::kSum, DType::kInt32, d, d, d, n, s), Status::kOk);  // 2x
  ASSERT_EQ(ops->copy_to_host_async(h, d, n * sizeof(int32_t), s), Status::kOk);
  ASSERT_EQ(ops->stream_sync(s), Status::kOk) << ops->last_error();
  bool good = true;
  for (size_t i = 0; i < n; ++i) good = good && h[i] == static_cast<int32_t>(2 * i);
  EXPECT_TRUE(good);
  bool done = false;
  ASSERT_EQ(ops->stream_query(s, &done), Status::kOk);
  EXPECT_TRUE(done) << "nothing queued since the sync";
  // An allocation CUDA cannot make is a status with CUDA's reason, not a crash.
  void* huge = nullptr;
  EXPECT_EQ(ops->alloc_pinned(size_t{1} << 60, &huge), Status::kErrDevice);
  EXPECT_NE(ops->last_error().find("cudaHostAlloc"), std::string::npos) << ops->last_error();
  cudaFree(d);
  ops->stream_destroy(s);
  ops->free_pinned(pinned);
}

}  // namespace
}  // namespace skipring

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf(
        "skipring_cuda_tests: SKIPPED: no CUDA device (%s): the CUDA kernels and DeviceOps "
        "need a GPU\n",
        err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
