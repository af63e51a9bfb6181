// The device operations the staging path needs (docs/gpu.md): pinned host memory, asynchronous
// copies device <-> host on a stream, stream completion (query and blocking wait) and the
// device reduce. Two implementations: CUDA (runtime/cuda/cuda_device_ops.cpp, only with
// SKIPRING_HAVE_CUDA) and a host fake (plain memory, deferred memcpy, the host reduce kernels)
// that tests install with set_device_ops_hook, together with set_memtype_hook, so that the
// staging path runs on a machine without a GPU.
//
// Device pointers are only ever handed to these functions, never dereferenced by CPU code.
// Every function returns a Status (kErrDevice for a failed CUDA call, with last_error() saying
// which call and why); nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/dtype.h"
#include "common/status.h"

namespace skipring {

// An in-order queue of device work (a cudaStream_t and its completion event for CUDA).
struct DeviceStream;

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;

  // Page-locked host memory (usable by every device's copies), or kErrDevice / kErrNoMem.
  virtual Status alloc_pinned(size_t bytes, void** out) = 0;
  virtual void free_pinned(void* p) = 0;

  // A stream on the device that is current for the calling thread. Work enqueued later runs on
  // that device whichever device is current then.
  virtual Status stream_create(DeviceStream** out) = 0;
  virtual void stream_destroy(DeviceStream* s) = 0;

  // Enqueue copies: `dev` may be device, managed or (for tests) any memory CUDA can address;
  // `host` is pinned host memory from alloc_pinned.
  virtual Status copy_to_host_async(void* host, const void* dev, size_t bytes, DeviceStream* s) = 0;
  virtual Status copy_to_device_async(void* dev, const void* host, size_t bytes,
                                      DeviceStream* s) = 0;
  // Enqueue dst = a op b on device memory (cuda/cuda_reduce.h semantics; kErrType for long
  // double, kErrOp for a pair MPI does not define).
  virtual Status reduce_async(ROp op, DType t, void* dst, const void* a, const void* b,
                              size_t count, DeviceStream* s) = 0;

  // Whether everything enqueued on `s` so far has finished (an event recorded now and
  // queried; never blocks).
  virtual Status stream_query(DeviceStream* s, bool* done) = 0;
  // Blocks (without spinning the CPU) until everything enqueued on `s` has finished; the first
  // error of that work, if any.
  virtual Status stream_sync(DeviceStream* s) = 0;

  // What the last failed call was and why, e.g. "cudaMemcpyAsync: invalid argument".
  virtual std::string last_error() const = 0;
};

// The implementation the staging path uses now, or nullptr when there is none (then device
// buffers go to the MPI library, counted as fallbacks):
//  - nullptr when SKIPRING_GPU_STAGING=0;
//  - else the test hook's, when one is installed;
//  - else CUDA's when this build has CUDA and the CUDA runtime sees at least one device
//    (probed once, on the first device buffer; a machine without driver or device gives
//    nullptr and device_path_status() says why).
DeviceOps* device_ops();

// For skipring_info and the log: "CUDA (1 device)", "off (SKIPRING_GPU_STAGING=0)",
// "none: CUDA runtime: no CUDA-capable device is detected", "none (built without CUDA)".
// Probes CUDA (once) when built with it.
std::string device_path_status();

// Tests only: use `ops` instead of CUDA (nullptr restores CUDA). The object must outlive every
// communicator that staged through it (their pinned buffers are freed through it).
void set_device_ops_hook(DeviceOps* ops);

// The host fake: "device" memory is ordinary host memory; copies and reductions are queued on
// the stream and run at stream_query (when asked) or stream_sync, so a caller that reads a
// staging buffer before synchronising sees stale data, as it would with a real GPU. Counts what
// it did, and can be told to fail the n-th next call.
class FakeDeviceOps : public DeviceOps {
 public:
  struct Counters {
    uint64_t pinned_allocs = 0, pinned_frees = 0;
    int64_t pinned_live_bytes = 0;
    uint64_t streams_live = 0;
    uint64_t to_host_bytes = 0, to_device_bytes = 0;  // bytes copied (run, not just queued)
    uint64_t reductions = 0, syncs = 0;
  };
  FakeDeviceOps();
  ~FakeDeviceOps() override;
  const char* name() const override { return "host fake"; }
  Status alloc_pinned(size_t bytes, void** out) override;
  void free_pinned(void* p) override;
  Status stream_create(DeviceStream** out) override;
  void stream_destroy(DeviceStream* s) override;
  Status copy_to_host_async(void* host, const void* dev, size_t bytes, DeviceStream* s) override;
  Status copy_to_device_async(void* dev, const void* host, size_t bytes, DeviceStream* s) override;
  Status reduce_async(ROp op, DType t, void* dst, const void* a, const void* b, size_t count,
                      DeviceStream* s) override;
  Status stream_query(DeviceStream* s, bool* done) override;
  Status stream_sync(DeviceStream* s) override;
  std::string last_error() const override;

  Counters counters() const;
  // The calls_from_now-th next call (1: the next one) of alloc_pinned, copy_*, reduce_async,
  // stream_sync fails with kErrDevice; 0 disables.
  void fail_call(int calls_from_now);
  // Bytes of pinned memory handed out by alloc_pinned and not yet freed.
  int64_t pinned_live_bytes() const { return counters().pinned_live_bytes; }

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace skipring
