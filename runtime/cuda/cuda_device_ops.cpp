// DeviceOps on the CUDA runtime (cuda_device_ops.h): pinned memory with cudaHostAlloc (portable),
// copies with cudaMemcpyAsync (cudaMemcpyDefault: unified addressing tells the direction), one
// non-blocking stream and one blocking-sync event per DeviceStream, reductions with the kernels
// of cuda_reduce.cu. Waits block in the driver (cudaEventBlockingSync) instead of spinning.
#include "runtime/cuda/cuda_device_ops.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "runtime/cuda/cuda_reduce.h"

namespace skipring {
namespace {

struct CudaStream {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
};

CudaStream* cuda_stream(DeviceStream* s) { return reinterpret_cast<CudaStream*>(s); }

// Makes `device` current for the scope (the application may have switched since the stream was
// made) and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

class CudaDeviceOps : public DeviceOps {
 public:
  const char* name() const override { return "CUDA"; }

  Status alloc_pinned(size_t bytes, void** out) override {
    *out = nullptr;
    return check(cudaHostAlloc(out, bytes == 0 ? 1 : bytes, cudaHostAllocPortable),
                 "cudaHostAlloc");
  }

  void free_pinned(void* p) override {
    if (p != nullptr) check(cudaFreeHost(p), "cudaFreeHost");
  }

  Status stream_create(DeviceStream** out) override {
    *out = nullptr;
    auto* s = new CudaStream;
    Status st = check(cudaGetDevice(&s->device), "cudaGetDevice");
    if (ok(st)) {
      st = check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
    }
    if (ok(st)) {
      st =
          check(cudaEventCreateWithFlags(&s->event, cudaEventDisableTiming | cudaEventBlockingSync),
                "cudaEventCreateWithFlags");
    }
    if (!ok(st)) {
      stream_destroy(reinterpret_cast<DeviceStream*>(s));
      return st;
    }
    *out = reinterpret_cast<DeviceStream*>(s);
    return Status::kOk;
  }

  void stream_destroy(DeviceStream* ds) override {
    CudaStream* s = cuda_stream(ds);
    if (s == nullptr) return;
    {
      DeviceScope scope(s->device);
      if (s->event != nullptr) cudaEventDestroy(s->event);
      if (s->stream != nullptr) cudaStreamDestroy(s->stream);
    }
    delete s;
  }

  Status copy_to_host_async(void* host, const void* dev, size_t bytes, DeviceStream* ds) override {
    return copy(host, dev, bytes, ds);
  }

  Status copy_to_device_async(void* dev, const void* host, size_t bytes,
                              DeviceStream* ds) override {
    return copy(dev, host, bytes, ds);
  }

  Status reduce_async(ROp op, DType t, void* dst, const void* a, const void* b, size_t count,
                      DeviceStream* ds) override {
    CudaStream* s = cuda_stream(ds);
    DeviceScope scope(s->device);
    int err = 0;
    const Status st = cuda::reduce_async(op, t, dst, a, b, count, s->stream, &err);
    if (st == Status::kErrDevice)
      return check(static_cast<cudaError_t>(err), "reduce kernel launch");
    return st;
  }

  Status stream_query(DeviceStream* ds, bool* done) override {
    CudaStream* s = cuda_stream(ds);
    DeviceScope scope(s->device);
    *done = false;
    SKIPRING_RETURN_IF_ERROR(check(cudaEventRecord(s->event, s->stream), "cudaEventRecord"));
    const cudaError_t err = cudaEventQuery(s->event);
    if (err == cudaErrorNotReady) return Status::kOk;
    *done = err == cudaSuccess;
    return check(err, "cudaEventQuery");
  }

  Status stream_sync(DeviceStream* ds) override {
    CudaStream* s = cuda_stream(ds);
    DeviceScope scope(s->device);
    SKIPRING_RETURN_IF_ERROR(check(cudaEventRecord(s->event, s->stream), "cudaEventRecord"));
    return check(cudaEventSynchronize(s->event), "cudaEventSynchronize");
  }

  std::string last_error() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_error_;
  }

 private:
  Status copy(void* dst, const void* src, size_t bytes, DeviceStream* ds) {
    if (bytes == 0) return Status::kOk;
    CudaStream* s = cuda_stream(ds);
    DeviceScope scope(s->device);
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream), "cudaMemcpyAsync");
  }

  Status check(cudaError_t err, const char* call) const {
    if (err == cudaSuccess) return Status::kOk;
    std::lock_guard<std::mutex> lock(mutex_);
    last_error_ =
        std::string(call) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    return Status::kErrDevice;
  }

  mutable std::mutex mutex_;
  mutable std::string last_error_ = "no error";
};

struct Probe {
  DeviceOps* ops = nullptr;
  std::string status;
};

Probe probe() {
  Probe p;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.status = std::string("CUDA runtime: ") + cudaGetErrorName(err) + " (" +
               cudaGetErrorString(err) + ")";
    return p;
  }
  if (count <= 0) {
    p.status = "CUDA runtime: no device";
    return p;
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  p.ops = new CudaDeviceOps;  // process lifetime: communicators free through it at finalize
  p.status = "CUDA (" + std::to_string(count) + (count == 1 ? " device" : " devices") +
             ", runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver) + ")";
  return p;
}

}  // namespace

DeviceOps* cuda_device_ops(std::string* status) {
  static const Probe p = probe();
  if (status != nullptr) *status = p.status;
  return p.ops;
}

}  // namespace skipring
