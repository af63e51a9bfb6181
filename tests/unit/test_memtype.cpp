// Memory-type classification (runtime/memtype.h): host memory is host with or without a CUDA
// driver; the test hook replaces the driver; names and host accessibility.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "runtime/memtype.h"

namespace skipring {
namespace {

const void* g_fake_device = nullptr;
MemType fake(const void* p) { return p == g_fake_device ? MemType::kDevice : MemType::kHost; }

TEST(MemType, HostMemoryIsHost) {
  // True with no driver (this machine) and with one (malloc'd memory is unknown to CUDA).
  std::vector<float> heap(1024);
  int stack = 0;
  void* raw = std::malloc(64);
  EXPECT_EQ(classify_memory(heap.data()), MemType::kHost);
  EXPECT_EQ(classify_memory(&stack), MemType::kHost);
  EXPECT_EQ(classify_memory(raw), MemType::kHost);
  EXPECT_EQ(classify_memory(nullptr), MemType::kHost);
  EXPECT_EQ(classify_memory(MPI_IN_PLACE), MemType::kHost);
  std::free(raw);
  EXPECT_FALSE(cuda_driver_status().empty());
}

TEST(MemType, HookReplacesTheDriver) {
  std::vector<float> a(16), b(16);
  g_fake_device = a.data();
  set_memtype_hook(fake);
  EXPECT_EQ(classify_memory(a.data()), MemType::kDevice);
  EXPECT_EQ(classify_memory(b.data()), MemType::kHost);
  set_memtype_hook(nullptr);
  EXPECT_EQ(classify_memory(a.data()), MemType::kHost);
}

TEST(MemType, OnlyHostMemoryIsHostAccessible) {
  EXPECT_TRUE(host_accessible(MemType::kHost));
  EXPECT_TRUE(host_accessible(MemType::kPinnedHost));
  EXPECT_FALSE(host_accessible(MemType::kDevice));
  EXPECT_FALSE(host_accessible(MemType::kManaged));
  EXPECT_STREQ(memtype_name(MemType::kDevice), "CUDA device");
  EXPECT_STREQ(memtype_name(MemType::kManaged), "CUDA managed");
}

}  // namespace
}  // namespace skipring
