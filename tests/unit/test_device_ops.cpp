// DeviceOps (runtime/device_ops.h): the host fake that the staging tests install, and which
// implementation device_ops() picks. The CUDA implementation and kernels are tested on a GPU by
// tests/cuda/ (skipped, exit 77, without one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "runtime/config.h"
#include "runtime/device_ops.h"

namespace skipring {
namespace {

TEST(DeviceOps, FakeCopiesHappenAtSyncNotBefore) {
  FakeDeviceOps fake;
  DeviceStream* s = nullptr;
  ASSERT_EQ(fake.stream_create(&s), Status::kOk);
  void* pinned = nullptr;
  ASSERT_EQ(fake.alloc_pinned(64, &pinned), Status::kOk);
  std::vector<uint8_t> dev(64, 7);
  std::memset(pinned, 0, 64);
  ASSERT_EQ(fake.copy_to_host_async(pinned, dev.data(), 64, s), Status::kOk);
  EXPECT_EQ(static_cast<uint8_t*>(pinned)[63], 0) << "queued, not run yet";
  EXPECT_EQ(fake.counters().to_host_bytes, 0u);
  ASSERT_EQ(fake.stream_sync(s), Status::kOk);
  EXPECT_EQ(static_cast<uint8_t*>(pinned)[63], 7);
  EXPECT_EQ(fake.counters().to_host_bytes, 64u);

  std::memset(pinned, 9, 64);
  ASSERT_EQ(fake.copy_to_device_async(dev.data(), pinned, 32, s), Status::kOk);
  bool done = false;
  ASSERT_EQ(fake.stream_query(s, &done), Status::kOk);
  EXPECT_TRUE(done);
  EXPECT_EQ(dev[31], 9);
  EXPECT_EQ(dev[32], 7) << "only 32 bytes copied";
  EXPECT_EQ(fake.counters().to_device_bytes, 32u);
  fake.free_pinned(pinned);
  fake.stream_destroy(s);
  EXPECT_EQ(fake.counters().pinned_live_bytes, 0);
  EXPECT_EQ(fake.counters().streams_live, 0u);
}

TEST(DeviceOps, FakeReduceIsTheHostKernel) {
  FakeDeviceOps fake;
  DeviceStream* s = nullptr;
  ASSERT_EQ(fake.stream_create(&s), Status::kOk);
  std::vector<float> a = {1.5f, -0.0f, 3.0f, 1e30f}, b = {2.25f, 0.0f, -3.0f, 1e30f}, d(4);
  std::vector<float> ref(4);
  ASSERT_EQ(reduce(ROp::kSum, DType::kFloat, ref.data(), a.data(), b.data(), 4), Status::kOk);
  ASSERT_EQ(fake.reduce_async(ROp::kSum, DType::kFloat, d.data(), a.data(), b.data(), 4, s),
            Status::kOk);
  EXPECT_EQ(d[0], 0.0f) << "queued until sync";
  ASSERT_EQ(fake.stream_sync(s), Status::kOk);
  EXPECT_EQ(std::memcmp(d.data(), ref.data(), sizeof(float) * 4), 0);
  EXPECT_EQ(fake.counters().reductions, 1u);
  // As the CUDA kernels: no long double on a device, MPI's op/type table enforced.
  EXPECT_EQ(fake.reduce_async(ROp::kSum, DType::kLongDouble, d.data(), a.data(), b.data(), 1, s),
            Status::kErrType);
  EXPECT_EQ(fake.reduce_async(ROp::kBand, DType::kFloat, d.data(), a.data(), b.data(), 1, s),
            Status::kErrOp);
  // Nor the complex and MINLOC/MAXLOC pair types (host kernels only).
  EXPECT_EQ(fake.reduce_async(ROp::kSum, DType::kComplexFloat, d.data(), a.data(), b.data(), 1, s),
            Status::kErrType);
  EXPECT_EQ(fake.reduce_async(ROp::kMinloc, DType::kFloatInt, d.data(), a.data(), b.data(), 1, s),
            Status::kErrType);
  fake.stream_destroy(s);
}

TEST(DeviceOps, FakeInjectedFailure) {
  FakeDeviceOps fake;
  DeviceStream* s = nullptr;
  ASSERT_EQ(fake.stream_create(&s), Status::kOk);
  std::vector<uint8_t> x(8), y(8);
  fake.fail_call(2);
  EXPECT_EQ(fake.copy_to_host_async(x.data(), y.data(), 8, s), Status::kOk);
  EXPECT_EQ(fake.copy_to_host_async(x.data(), y.data(), 8, s), Status::kErrDevice);
  EXPECT_NE(fake.last_error().find("copy_to_host_async"), std::string::npos) << fake.last_error();
  EXPECT_EQ(fake.stream_sync(s), Status::kOk) << "only the failing call failed";
  void* p = nullptr;
  fake.fail_call(1);
  EXPECT_EQ(fake.alloc_pinned(16, &p), Status::kErrDevice);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(fake.counters().pinned_live_bytes, 0);
  fake.stream_destroy(s);
}

// device_ops(): off with SKIPRING_GPU_STAGING=0 even with a hook; the hook otherwise; without a
// hook CUDA's when built with it and a device is present, else none (this machine: no GPU).
TEST(DeviceOps, SelectionFollowsStagingFlagAndHook) {
  const Config saved = global_config();
  FakeDeviceOps fake;
  Config cfg = saved;
  cfg.gpu_staging = true;
  set_global_config(cfg);
  set_device_ops_hook(&fake);
  EXPECT_EQ(device_ops(), &fake);
  EXPECT_EQ(device_path_status(), "test hook (host fake)");
  cfg.gpu_staging = false;
  set_global_config(cfg);
  EXPECT_EQ(device_ops(), nullptr);
  EXPECT_EQ(device_path_status(), "off (SKIPRING_GPU_STAGING=0)");
  cfg.gpu_staging = true;
  set_global_config(cfg);
  set_device_ops_hook(nullptr);
  DeviceOps* real = device_ops();
  const std::string status = device_path_status();
  if (real == nullptr) {
    EXPECT_EQ(status.rfind("none", 0), 0u) << status;  // says why, e.g. no driver
  } else {
    EXPECT_STREQ(real->name(), "CUDA");
    EXPECT_EQ(status.rfind("CUDA (", 0), 0u) << status;
  }
  set_global_config(saved);
}

TEST(DeviceOps, StagingFlagIsAParameter) {
  Config cfg;
  std::string error;
  EXPECT_TRUE(cfg.gpu_staging);
  const EnvLookup env = [](const char* name, std::string* value) {
    if (std::string(name) != "SKIPRING_GPU_STAGING") return false;
    *value = "0";
    return true;
  };
  ASSERT_EQ(load_config(env, &cfg, &error), Status::kOk) << error;
  EXPECT_FALSE(cfg.gpu_staging);
}

}  // namespace
}  // namespace skipring
