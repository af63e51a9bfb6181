// The device path's staging (issue 14, part 2) on a machine without a GPU: the memtype hook
// (runtime/memtype.h) makes chosen host buffers look like CUDA device or managed memory, and
// FakeDeviceOps (runtime/device_ops.h) stands in for CUDA. Its copies only happen when the
// stream is synchronised, so a staging path that read a pinned buffer before synchronising, or
// returned before the copy back, would give wrong results here.
//
// Default: every collective on "device" buffers runs in skipring (counted as skipring calls, no
// fallback), with exact results, the exact bytes copied each way, in-place and mixed
// host/device arguments, pooled buffers freed with the communicator, and CUDA errors as MPI
// errors that leave the communicator usable.
// With SKIPRING_GPU_STAGING=0 in the environment: the same calls go to PMPI (fallbacks) and the
// fake is never used.
// --straggler (with SKIPRING_INJECT): staged all-reduces under an injected straggler skip ahead
// like host ones and give PMPI's result.
// Prints "N passed, M failed".
#include <mpi.h>
#include <skipring/skipring.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

MemType g_pretend = MemType::kDevice;
std::vector<const void*> g_marked;  // buffers that look like g_pretend
skipring::FakeDeviceOps* g_fake = nullptr;

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

struct Delta {
  uint64_t calls, fallbacks, to_host, to_device;
};

struct Snapshot {
  skipring_totals_t t = totals();
  skipring::FakeDeviceOps::Counters f = g_fake->counters();
  Delta since() const {
    const skipring_totals_t t1 = totals();
    const auto f1 = g_fake->counters();
    return {t1.calls - t.calls, t1.fallbacks - t.fallbacks, f1.to_host_bytes - f.to_host_bytes,
            f1.to_device_bytes - f.to_device_bytes};
  }
};

bool staging_on() {
  const char* v = std::getenv("SKIPRING_GPU_STAGING");
  return v == nullptr || std::string(v) != "0";
}

// `n` calls ran in skipring (staging on) or went to PMPI (off); with staging, exactly the given
// bytes were copied each way.
void expect_route(const Delta& d, uint64_t n, uint64_t to_host, uint64_t to_device,
                  const std::string& label) {
  const std::string got = " (skipring calls " + std::to_string(d.calls) + ", fallbacks " +
                          std::to_string(d.fallbacks) + ", to host " + std::to_string(d.to_host) +
                          " B, to device " + std::to_string(d.to_device) + " B)";
  if (staging_on()) {
    check(d.calls == n && d.fallbacks == 0, label + ": staged, counted as skipring calls" + got);
    check(d.to_host == to_host && d.to_device == to_device,
          label + ": copied " + std::to_string(to_host) + " B to host, " +
              std::to_string(to_device) + " B to device" + got);
  } else {
    check(d.calls == 0 && d.fallbacks == n, label + ": passed to PMPI as fallbacks" + got);
    check(d.to_host == 0 && d.to_device == 0, label + ": the device path was not used" + got);
  }
}

constexpr int kCount = 4096;
constexpr size_t kB = sizeof(int64_t);

int64_t value(int64_t i, int r) { return i * 1000003 + r; }
int64_t sum_of(int64_t i) {
  int64_t s = 0;
  for (int r = 0; r < g_size; ++r) s += value(i, r);
  return s;
}

// The five collectives with every buffer marked.
void five_collectives(MemType kind, const std::string& label) {
  g_pretend = kind;
  std::vector<int64_t> in(kCount), out(kCount, -1), block(kCount / g_size + 1, -1);
  std::vector<int64_t> all(static_cast<size_t>(kCount) * g_size, -1), bc(kCount, -1);
  for (int i = 0; i < kCount; ++i) in[i] = value(i, g_rank);
  if (g_rank == 0) bc = in;
  g_marked = {in.data(), out.data(), block.data(), all.data(), bc.data()};
  const int per = kCount / g_size;
  const Snapshot s0;

  check(skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        label + ": allreduce returns MPI_SUCCESS");
  bool good = true;
  for (int i = 0; i < kCount; ++i) good = good && out[i] == sum_of(i);
  check(good, label + ": allreduce result");

  check(skipring_reduce_scatter_block(in.data(), block.data(), per, MPI_INT64_T, MPI_SUM,
                                      MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": reduce_scatter_block returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < per; ++i) good = good && block[i] == sum_of(g_rank * per + i);
  check(good, label + ": reduce_scatter_block result");

  check(skipring_allgather(in.data(), kCount, MPI_INT64_T, all.data(), kCount, MPI_INT64_T,
                           MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": allgather returns MPI_SUCCESS");
  good = true;
  for (int r = 0; r < g_size; ++r) {
    for (int i = 0; i < kCount; ++i) good = good && all[size_t(r) * kCount + i] == value(i, r);
  }
  check(good, label + ": allgather result");

  check(skipring_bcast(bc.data(), kCount, MPI_INT64_T, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
        label + ": bcast returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < kCount; ++i) good = good && bc[i] == value(i, 0);
  check(good, label + ": bcast result");

  std::fill(out.begin(), out.end(), -1);
  check(skipring_reduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        label + ": reduce returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < kCount; ++i) good = good && out[i] == (g_rank == 0 ? sum_of(i) : -1);
  check(good, label + ": reduce result at the root, recvbuf untouched elsewhere");

  // Bytes each way: allreduce in + out; reduce_scatter n blocks in, one out; allgather own
  // block in, n blocks out; bcast in at the root, out elsewhere; reduce in, out at the root.
  const uint64_t full = kCount * kB, n = static_cast<uint64_t>(g_size);
  const uint64_t to_host = full + per * n * kB + full + (g_rank == 0 ? full : 0) + full;
  const uint64_t to_device =
      full + per * kB + n * full + (g_rank == 0 ? 0 : full) + (g_rank == 0 ? full : 0);
  expect_route(s0.since(), 5, to_host, to_device, label);
  g_marked.clear();
}

// In-place forms on "device" buffers: the input comes from recvbuf.
void in_place_forms() {
  g_pretend = MemType::kDevice;
  const Snapshot s0;
  std::vector<int64_t> buf(kCount);
  for (int i = 0; i < kCount; ++i) buf[i] = value(i, g_rank);
  g_marked = {buf.data()};
  check(skipring_allreduce(MPI_IN_PLACE, buf.data(), kCount, MPI_INT64_T, MPI_SUM,
                           MPI_COMM_WORLD) == MPI_SUCCESS,
        "in place allreduce returns MPI_SUCCESS");
  bool good = true;
  for (int i = 0; i < kCount; ++i) good = good && buf[i] == sum_of(i);
  check(good, "in place allreduce result");

  const int per = kCount / g_size;
  for (int i = 0; i < kCount; ++i) buf[i] = value(i, g_rank);
  check(skipring_reduce_scatter_block(MPI_IN_PLACE, buf.data(), per, MPI_INT64_T, MPI_SUM,
                                      MPI_COMM_WORLD) == MPI_SUCCESS,
        "in place reduce_scatter_block returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < per; ++i) good = good && buf[i] == sum_of(g_rank * per + i);
  check(good, "in place reduce_scatter_block result");

  std::vector<int64_t> all(static_cast<size_t>(kCount) * g_size, -7);
  for (int i = 0; i < kCount; ++i) all[size_t(g_rank) * kCount + i] = value(i, g_rank);
  g_marked = {all.data()};
  check(skipring_allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), kCount, MPI_INT64_T,
                           MPI_COMM_WORLD) == MPI_SUCCESS,
        "in place allgather returns MPI_SUCCESS");
  good = true;
  for (int r = 0; r < g_size; ++r) {
    for (int i = 0; i < kCount; ++i) good = good && all[size_t(r) * kCount + i] == value(i, r);
  }
  check(good, "in place allgather result");

  for (int i = 0; i < kCount; ++i) buf[i] = value(i, g_rank);
  g_marked = {buf.data()};
  const int rc = g_rank == 0 ? skipring_reduce(MPI_IN_PLACE, buf.data(), kCount, MPI_INT64_T,
                                               MPI_SUM, 0, MPI_COMM_WORLD)
                             : skipring_reduce(buf.data(), nullptr, kCount, MPI_INT64_T, MPI_SUM, 0,
                                               MPI_COMM_WORLD);
  check(rc == MPI_SUCCESS, "in place reduce returns MPI_SUCCESS");
  good = true;
  for (int i = 0; i < kCount; ++i)
    good = good && buf[i] == (g_rank == 0 ? sum_of(i) : value(i, g_rank));
  check(good, "in place reduce result at the root, input unchanged elsewhere");

  const uint64_t full = kCount * kB, n = static_cast<uint64_t>(g_size);
  const uint64_t to_host = full + per * n * kB + full + full;  // allgather: own block only
  const uint64_t to_device = full + per * kB + n * full + (g_rank == 0 ? full : 0);
  expect_route(s0.since(), 4, to_host, to_device, "in place forms");
  g_marked.clear();
}

// One device buffer among host ones: only that one is staged.
void mixed_arguments() {
  g_pretend = MemType::kDevice;
  std::vector<int64_t> in(kCount), out(kCount, -1);
  for (int i = 0; i < kCount; ++i) in[i] = value(i, g_rank);
  const uint64_t full = kCount * kB;
  for (int which = 0; which < 2; ++which) {
    const std::string label = which == 0 ? "device recvbuf only" : "device sendbuf only";
    g_marked = {which == 0 ? static_cast<const void*>(out.data()) : in.data()};
    std::fill(out.begin(), out.end(), -1);
    const Snapshot s0;
    check(skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) ==
              MPI_SUCCESS,
          label + ": allreduce returns MPI_SUCCESS");
    bool good = true;
    for (int i = 0; i < kCount; ++i) good = good && out[i] == sum_of(i);
    check(good, label + ": allreduce result");
    expect_route(s0.since(), 1, which == 0 ? 0 : full, which == 0 ? full : 0,
                 label + " (allreduce)");

    std::vector<int64_t> all(static_cast<size_t>(kCount) * g_size, -1);
    g_marked = {which == 0 ? static_cast<const void*>(all.data()) : in.data()};
    const Snapshot s1;
    check(skipring_allgather(in.data(), kCount, MPI_INT64_T, all.data(), kCount, MPI_INT64_T,
                             MPI_COMM_WORLD) == MPI_SUCCESS,
          label + ": allgather returns MPI_SUCCESS");
    good = true;
    for (int r = 0; r < g_size; ++r) {
      for (int i = 0; i < kCount; ++i) good = good && all[size_t(r) * kCount + i] == value(i, r);
    }
    check(good, label + ": allgather result");
    expect_route(s1.since(), 1, which == 0 ? 0 : full, which == 0 ? full * g_size : 0,
                 label + " (allgather)");
  }
  g_marked.clear();
}

// Float SUM: staging changes nothing in the reduction, so the bits equal the host-buffer call's.
void float_bits_unchanged() {
  std::vector<float> in(kCount), host_out(kCount), dev_out(kCount);
  for (int i = 0; i < kCount; ++i) in[i] = static_cast<float>((i * 7 + g_rank * 13) % 1000) / 7.f;
  g_marked.clear();
  check(skipring_allreduce(in.data(), host_out.data(), kCount, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD) == MPI_SUCCESS,
        "float allreduce on host buffers");
  g_pretend = MemType::kDevice;
  g_marked = {in.data(), dev_out.data()};
  check(skipring_allreduce(in.data(), dev_out.data(), kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        "float allreduce on device buffers");
  check(std::memcmp(host_out.data(), dev_out.data(), kCount * sizeof(float)) == 0,
        "float sum: device-buffer result bitwise equal to the host-buffer one");
  g_marked.clear();
}

// Staging buffers belong to the communicator: they grow, and go with MPI_Comm_free.
void pool_lifetime() {
  g_pretend = MemType::kDevice;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  const auto f0 = g_fake->counters();
  std::vector<int64_t> in(4 * kCount, 1), out(4 * kCount, 0);
  g_marked = {in.data(), out.data()};
  check(
      skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, dup) == MPI_SUCCESS &&
          out[kCount - 1] == g_size,
      "pool: small staged allreduce on a duplicate");
  const auto f1 = g_fake->counters();
  check(f1.pinned_live_bytes > f0.pinned_live_bytes && f1.streams_live == f0.streams_live + 1,
        "pool: pinned buffers and a stream made for the new communicator");
  check(skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, dup) == MPI_SUCCESS,
        "pool: same size again");
  check(g_fake->counters().pinned_allocs == f1.pinned_allocs, "pool: same size reuses buffers");
  check(skipring_allreduce(in.data(), out.data(), 4 * kCount, MPI_INT64_T, MPI_SUM, dup) ==
                MPI_SUCCESS &&
            out[4 * kCount - 1] == g_size,
        "pool: larger staged allreduce");
  check(g_fake->counters().pinned_allocs > f1.pinned_allocs &&
            g_fake->counters().pinned_live_bytes >= f0.pinned_live_bytes + 2 * 4 * kCount * 8,
        "pool: grown for the larger call");
  MPI_Comm_free(&dup);
  const auto f2 = g_fake->counters();
  check(f2.pinned_live_bytes == f0.pinned_live_bytes && f2.streams_live == f0.streams_live,
        "pool: freed with the communicator (live pinned bytes " +
            std::to_string(f2.pinned_live_bytes) + ", before " +
            std::to_string(f0.pinned_live_bytes) + ")");
  g_marked.clear();
}

// A failing device call is an MPI error on every rank (all ranks fail alike here, so nobody is
// left waiting) and the communicator stays usable.
void device_errors() {
  g_pretend = MemType::kDevice;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  std::vector<int64_t> in(kCount, 2), out(kCount, 0);
  g_marked = {in.data(), out.data()};
  auto run = [&] {
    std::fill(out.begin(), out.end(), 0);
    return skipring_allreduce(in.data(), out.data(), kCount, MPI_INT64_T, MPI_SUM, dup);
  };
  // Fresh pool: 1 alloc (output), 2 alloc (input), 3 copy in, 4 sync, 5 copy back, 6 sync.
  g_fake->fail_call(1);
  check(run() == MPI_ERR_OTHER, "pinned allocation failure: MPI_ERR_OTHER");
  g_fake->fail_call(0);
  check(run() == MPI_SUCCESS && out[0] == 2 * g_size, "after an allocation failure: works");
  // Pool allocated now: 1 copy in, 2 sync, 3 copy back, 4 sync.
  g_fake->fail_call(3);
  check(run() == MPI_ERR_OTHER, "copy back failure: MPI_ERR_OTHER");
  g_fake->fail_call(4);
  check(run() == MPI_ERR_OTHER, "final sync failure: MPI_ERR_OTHER");
  g_fake->fail_call(1);
  check(run() == MPI_ERR_OTHER, "copy in failure: MPI_ERR_OTHER");
  g_fake->fail_call(0);
  check(run() == MPI_SUCCESS && out[kCount - 1] == 2 * g_size, "after the failures: works");
  g_marked.clear();
  MPI_Comm_free(&dup);
}

// Skip-ahead on staged buffers: the ring with an injected straggler (SKIPRING_INJECT).
void straggler() {
  check(skipring_set_algo("skipring") == MPI_SUCCESS, "skipring_set_algo");
  g_pretend = MemType::kDevice;
  const size_t count = 1 << 17;
  std::vector<int64_t> in(count), out(count), ref(count);
  const skipring_totals_t t0 = totals();
  for (int it = 0; it < 8; ++it) {
    for (size_t i = 0; i < count; ++i) {
      in[i] = static_cast<int64_t>((i * 2654435761u + g_rank * 40503u + it) % 100000) - 50000;
    }
    g_marked = {in.data(), out.data()};
    check(skipring_allreduce(in.data(), out.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                             MPI_COMM_WORLD) == MPI_SUCCESS,
          "staged allreduce under a straggler");
    g_marked.clear();
    PMPI_Allreduce(in.data(), ref.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                   MPI_COMM_WORLD);
    check(out == ref, "staged result equals PMPI_Allreduce, iteration " + std::to_string(it));
  }
  const skipring_totals_t t1 = totals();
  uint64_t mine[2] = {t1.skips - t0.skips, t1.calls - t0.calls}, all[2] = {0, 0};
  PMPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  check(all[1] == 8u * g_size, "every staged allreduce counted as a skipring call");
  check(all[0] > 0, "the straggler made ranks skip ahead on staged buffers (skips " +
                        std::to_string(all[0]) + ")");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  check(skipring_init() == MPI_SUCCESS, "skipring_init");
  bool straggler_mode = false;
  for (int i = 1; i < argc; ++i)
    straggler_mode = straggler_mode || std::string(argv[i]) == "--straggler";
  static skipring::FakeDeviceOps fake;  // outlives every communicator (freed at MPI_Finalize)
  g_fake = &fake;
  skipring::set_memtype_hook(hook);
  skipring::set_device_ops_hook(&fake);
  check((skipring::device_ops() == &fake) == staging_on(),
        "device_ops(): the fake with staging on, none with SKIPRING_GPU_STAGING=0");
  if (straggler_mode) {
    straggler();
  } else {
    five_collectives(MemType::kDevice, "device buffers");
    five_collectives(MemType::kManaged, "managed buffers");
    in_place_forms();
    mixed_arguments();
    if (staging_on()) {
      float_bits_unchanged();
      pool_lifetime();
      device_errors();
    }
  }
  const int rc = mpitest::finish();
  MPI_Finalize();
  skipring::set_device_ops_hook(nullptr);
  skipring::set_memtype_hook(nullptr);
  return rc;
}
