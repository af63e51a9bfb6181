// Device operations: which implementation the staging path uses, and the host fake
// (device_ops.h).
#include "runtime/device_ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "runtime/config.h"
#ifdef SKIPRING_HAVE_CUDA
#include "runtime/cuda/cuda_device_ops.h"
#endif

namespace skipring {
namespace {

std::atomic<DeviceOps*> g_hook{nullptr};

}  // namespace

DeviceOps* device_ops() {
  if (!global_config().gpu_staging) return nullptr;
  if (DeviceOps* hook = g_hook.load(std::memory_order_acquire)) return hook;
#ifdef SKIPRING_HAVE_CUDA
  return cuda_device_ops(nullptr);
#else
  return nullptr;
#endif
}

std::string device_path_status() {
  if (!global_config().gpu_staging) return "off (SKIPRING_GPU_STAGING=0)";
  if (DeviceOps* hook = g_hook.load(std::memory_order_acquire)) {
    return std::string("test hook (") + hook->name() + ")";
  }
#ifdef SKIPRING_HAVE_CUDA
  std::string why;
  return cuda_device_ops(&why) != nullptr ? why : "none: " + why;
#else
  return "none (built without CUDA)";
#endif
}

void set_device_ops_hook(DeviceOps* ops) { g_hook.store(ops, std::memory_order_release); }

// ---- The host fake ---------------------------------------------------------------------------

namespace {

struct FakeStream {
  std::vector<std::function<Status()>> queue;  // run in order at query / sync
};

}  // namespace

struct FakeDeviceOps::Impl {
  mutable std::mutex mutex;
  Counters counters;
  std::map<void*, size_t> pinned;  // live allocations and their sizes
  int fail_in = 0;                 // 0: never; n: the n-th next failable call fails
  std::string last_error = "no error";

  // Called under the mutex by every failable call; true when this one must fail.
  bool should_fail(const char* what) {
    if (fail_in == 0) return false;
    if (--fail_in != 0) return false;
    last_error = std::string(what) + ": injected failure (FakeDeviceOps::fail_call)";
    return true;
  }

  static FakeStream* stream(DeviceStream* s) { return reinterpret_cast<FakeStream*>(s); }

  // Runs the queued work of `s` in order; the first failure is returned (the rest is dropped,
  // as a CUDA stream in error runs nothing more).
  Status drain(FakeStream* s) {
    std::vector<std::function<Status()>> work;
    work.swap(s->queue);
    for (auto& w : work) {
      const Status st = w();
      if (st != Status::kOk) return st;
    }
    return Status::kOk;
  }
};

FakeDeviceOps::FakeDeviceOps() : impl_(new Impl) {}

FakeDeviceOps::~FakeDeviceOps() {
  for (auto& [p, bytes] : impl_->pinned) std::free(p);
  delete impl_;
}

Status FakeDeviceOps::alloc_pinned(size_t bytes, void** out) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  *out = nullptr;
  if (impl_->should_fail("alloc_pinned")) return Status::kErrDevice;
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return Status::kErrNoMem;
  impl_->pinned[p] = bytes;
  ++impl_->counters.pinned_allocs;
  impl_->counters.pinned_live_bytes += static_cast<int64_t>(bytes);
  *out = p;
  return Status::kOk;
}

void FakeDeviceOps::free_pinned(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->pinned.find(p);
  if (it == impl_->pinned.end()) std::abort();  // not ours: a bug worth stopping a test for
  impl_->counters.pinned_live_bytes -= static_cast<int64_t>(it->second);
  ++impl_->counters.pinned_frees;
  impl_->pinned.erase(it);
  std::free(p);
}

Status FakeDeviceOps::stream_create(DeviceStream** out) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  *out = reinterpret_cast<DeviceStream*>(new FakeStream);
  ++impl_->counters.streams_live;
  return Status::kOk;
}

void FakeDeviceOps::stream_destroy(DeviceStream* s) {
  if (s == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  delete Impl::stream(s);
  --impl_->counters.streams_live;
}

Status FakeDeviceOps::copy_to_host_async(void* host, const void* dev, size_t bytes,
                                         DeviceStream* s) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->should_fail("copy_to_host_async")) return Status::kErrDevice;
  Impl* impl = impl_;
  Impl::stream(s)->queue.push_back([impl, host, dev, bytes] {
    if (bytes > 0) std::memcpy(host, dev, bytes);
    impl->counters.to_host_bytes += bytes;
    return Status::kOk;
  });
  return Status::kOk;
}

Status FakeDeviceOps::copy_to_device_async(void* dev, const void* host, size_t bytes,
                                           DeviceStream* s) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->should_fail("copy_to_device_async")) return Status::kErrDevice;
  Impl* impl = impl_;
  Impl::stream(s)->queue.push_back([impl, dev, host, bytes] {
    if (bytes > 0) std::memcpy(dev, host, bytes);
    impl->counters.to_device_bytes += bytes;
    return Status::kOk;
  });
  return Status::kOk;
}

Status FakeDeviceOps::reduce_async(ROp op, DType t, void* dst, const void* a, const void* b,
                                   size_t count, DeviceStream* s) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->should_fail("reduce_async")) return Status::kErrDevice;
  // The same checks as the CUDA kernels, before anything is queued.
  if (static_cast<int>(t) >= kNumDTypes || !dtype_on_device(t)) return Status::kErrType;
  if (static_cast<int>(op) >= kNumROps || !op_valid(op, t)) return Status::kErrOp;
  if (count > 0 && (dst == nullptr || a == nullptr || b == nullptr)) return Status::kErrBuffer;
  Impl* impl = impl_;
  Impl::stream(s)->queue.push_back([impl, op, t, dst, a, b, count] {
    ++impl->counters.reductions;
    return reduce(op, t, dst, a, b, count);
  });
  return Status::kOk;
}

Status FakeDeviceOps::stream_query(DeviceStream* s, bool* done) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // The fake's work finishes when asked about: a query runs it (a real stream runs on its own).
  const Status st = impl_->drain(Impl::stream(s));
  *done = true;
  return st;
}

Status FakeDeviceOps::stream_sync(DeviceStream* s) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  ++impl_->counters.syncs;
  if (impl_->should_fail("stream_sync")) {
    Impl::stream(s)->queue.clear();
    return Status::kErrDevice;
  }
  return impl_->drain(Impl::stream(s));
}

std::string FakeDeviceOps::last_error() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->last_error;
}

FakeDeviceOps::Counters FakeDeviceOps::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counters;
}

void FakeDeviceOps::fail_call(int calls_from_now) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->fail_in = calls_from_now < 0 ? 0 : calls_from_now;
}

}  // namespace skipring
