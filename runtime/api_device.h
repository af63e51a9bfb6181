// Device buffers in the C API (docs/gpu.md). Every buffer of every collective is classified
// (runtime/memtype.h). Device and managed buffers never reach CPU code: with a device path
// (device_ops(): CUDA with a device, or a test's fake) they are copied through the
// communicator's pinned staging buffers and the normal host collective runs on those
// (skip-ahead, late arrival and injection unchanged); without one (SKIPRING_GPU_STAGING=0, no
// CUDA, no device) the call goes to the MPI library, counted as a fallback. Every rank must
// pass the same kind of memory to a given call.
//
// The staged collectives: `dev` has bit 0 for sendbuf and bit 1 for recvbuf (bcast: bit 0 for
// buffer) when that buffer is device memory; the others are passed to the collective as they
// are. Inputs are copied to pinned buffer 0 (in place: to buffer 1, which then holds input and
// result), the stream is synchronised, the host collective runs, results are copied back and
// synchronised again before returning. The call counts as a skipring call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "runtime/communicator.h"
#include "runtime/device_ops.h"
#include "runtime/memtype.h"

namespace skipring::api {

class StagingPool;  // a communicator's pinned buffers and stream (api_device.cpp)

// Which of `bufs` are device or managed memory: bit i for bufs[i] (0: all host). Inline where
// no buffer can be device memory (no CUDA driver, no test hook: one load, no call; the `mpi`
// row's front path runs it on every repeat), else classify_buffers.
unsigned classify_buffers(std::initializer_list<const void*> bufs);
inline unsigned device_buffers(std::initializer_list<const void*> bufs) {
  if (g_front.memory_host_only.load(std::memory_order_acquire)) return 0;
  return classify_buffers(bufs);
}
// The device path for a call with device buffers, or nullptr (the call goes to PMPI). Said once
// per process at info level (a CUDA-aware application passes device buffers on every call).
DeviceOps* device_path(const char* fn);
// Frees c's staging pool, if it has one (its state is being deleted).
void release_staging(Communicator* c);

// One staged collective: the communicator's staging pool, copies queued on its stream, the
// first error kept (later steps do nothing then). Device pointers are only handed to `ops`.
class Staged {
 public:
  Staged(const char* fn, Communicator* c, DeviceOps* ops);

  bool failed() const { return rc_ != MPI_SUCCESS; }
  int rc() const { return rc_; }

  // Pinned buffer `which` (0 inputs, 1 outputs) of `bytes`; nullptr after an error.
  uint8_t* buffer(int which, size_t bytes);
  void to_host(void* host, const void* dev, size_t bytes);
  void to_device(void* dev, const void* host, size_t bytes);
  void sync();

 private:
  // Records a failed step: logged with the device's reason, the call returns an MPI error.
  bool fail(Status st, const char* what, DeviceOps* ops = nullptr);

  const char* fn_;
  StagingPool* pool_ = nullptr;
  int rc_ = MPI_SUCCESS;
};

// The end of a staged collective: its status, accounted when it ran; then the copies back.
int staged_result(Staged& s, Communicator* c, Status st, void* dev, const void* host, size_t bytes);
// The inputs of a staged all-reduce or reduce (dev bit 0: sendbuf on the device, bit 1:
// recvbuf): *in is what the host collective reads (the staged send buffer, or the staged
// receive buffer in place), *out where it writes (staging buffer 1 when recvbuf is on the
// device). False when a copy failed (s.rc() says why).
bool stage_reduction_inputs(Staged& s, unsigned dev, const void* sendbuf, void* recvbuf,
                            size_t bytes, const void** in, void** out);

}  // namespace skipring::api
