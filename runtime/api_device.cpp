// Device buffers in the C API: the staging pools and the staged collectives' steps
// (runtime/api_device.h).
#include "runtime/api_device.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/api_common.h"
#include "runtime/log.h"
#include "runtime/memtype.h"

namespace skipring::api {

// A communicator's pinned host buffers and stream for staging device buffers (docs/gpu.md):
// made on its first staged call, grown as needed, freed with the communicator's state.
class StagingPool {
 public:
  explicit StagingPool(DeviceOps* ops) : ops_(ops) {}
  ~StagingPool() {
    for (Buffer& b : buffers_) ops_->free_pinned(b.data);
    if (stream_ != nullptr) ops_->stream_destroy(stream_);
  }
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  DeviceOps* ops() const { return ops_; }
  Status init() { return ops_->stream_create(&stream_); }
  DeviceStream* stream() const { return stream_; }

  // Pinned buffer `which` (0: inputs, 1: outputs) of at least `bytes`; its old contents are not
  // kept. Grows by doubling (at least 64 KiB), so a run of growing calls reallocates rarely.
  Status buffer(int which, size_t bytes, uint8_t** out) {
    Buffer& b = buffers_[which];
    if (b.capacity < bytes) {
      size_t cap = b.capacity * 2 > bytes ? b.capacity * 2 : bytes;
      cap = (cap + kGrain - 1) / kGrain * kGrain;
      ops_->free_pinned(b.data);
      b = Buffer{};
      void* p = nullptr;
      SKIPRING_RETURN_IF_ERROR(ops_->alloc_pinned(cap, &p));
      b.data = static_cast<uint8_t*>(p);
      b.capacity = cap;
    }
    *out = b.data;
    return Status::kOk;
  }

 private:
  static constexpr size_t kGrain = 64 * 1024;
  struct Buffer {
    uint8_t* data = nullptr;
    size_t capacity = 0;
  };
  DeviceOps* ops_;
  DeviceStream* stream_ = nullptr;
  Buffer buffers_[2];
};

namespace {

// The staging pools of the communicators that staged device buffers, by communicator.
struct StagingPools {
  std::mutex mutex;
  std::map<Communicator*, std::unique_ptr<StagingPool>> pools;
};
StagingPools& staging() {
  static StagingPools* s = new StagingPools();  // never destroyed: used from MPI_Finalize hooks
  return *s;
}

}  // namespace

void release_staging(Communicator* c) {
  std::unique_ptr<StagingPool> pool;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(staging().mutex);
    auto it = staging().pools.find(c);
    if (it == staging().pools.end()) return;
    pool = std::move(it->second);
    staging().pools.erase(it);
  }
}

unsigned classify_buffers(std::initializer_list<const void*> bufs) {
  unsigned mask = 0, bit = 1;
  for (const void* p : bufs) {
    if (!host_accessible(classify_memory(p))) mask |= bit;
    bit <<= 1;
  }
  return mask;
}

DeviceOps* device_path(const char* fn) {
  DeviceOps* ops = device_ops();
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    if (ops != nullptr) {
      SKIPRING_LOG_INFO(
          "{}: device buffers: staged through pinned host buffers ({}), and so are later "
          "device-buffer calls",
          fn, ops->name());
    } else {
      SKIPRING_LOG_INFO(
          "{}: device buffers: passed to the MPI library (device path: {}; counted as a "
          "fallback, and so are later device-buffer calls)",
          fn, device_path_status());
    }
  }
  return ops;
}

Staged::Staged(const char* fn, Communicator* c, DeviceOps* ops) : fn_(fn) {
  std::lock_guard<std::mutex> lock(staging().mutex);
  std::unique_ptr<StagingPool>& pool = staging().pools[c];
  if (pool == nullptr || pool->ops() != ops) {  // a test may swap implementations
    pool.reset();
    auto fresh = std::make_unique<StagingPool>(ops);
    if (fail(fresh->init(), "creating the staging stream", ops)) return;
    pool = std::move(fresh);
  }
  pool_ = pool.get();
}

uint8_t* Staged::buffer(int which, size_t bytes) {
  uint8_t* p = nullptr;
  if (!failed()) fail(pool_->buffer(which, bytes, &p), "allocating pinned host memory");
  return failed() ? nullptr : p;
}

void Staged::to_host(void* host, const void* dev, size_t bytes) {
  if (!failed()) {
    fail(pool_->ops()->copy_to_host_async(host, dev, bytes, pool_->stream()),
         "copying device to host");
  }
}

void Staged::to_device(void* dev, const void* host, size_t bytes) {
  if (!failed()) {
    fail(pool_->ops()->copy_to_device_async(dev, host, bytes, pool_->stream()),
         "copying host to device");
  }
}

void Staged::sync() {
  if (!failed()) fail(pool_->ops()->stream_sync(pool_->stream()), "waiting for the copies");
}

bool Staged::fail(Status st, const char* what, DeviceOps* ops) {
  if (ok(st)) return false;
  if (ops == nullptr) ops = pool_->ops();
  SKIPRING_LOG_ERROR("{}: device staging failed {}: {} ({}): returns an MPI error", fn_, what,
                     status_string(st), ops->last_error());
  rc_ = to_mpi_error(st);
  return true;
}

int staged_result(Staged& s, Communicator* c, Status st, void* dev, const void* host,
                  size_t bytes) {
  if (!ok(st)) return to_mpi_error(st);
  account(c->last_stats());
  if (dev != nullptr) {
    s.to_device(dev, host, bytes);
    s.sync();
  }
  return s.rc();
}

// The inputs of a staged all-reduce or reduce (dev bit 0: sendbuf on the device, bit 1:
// recvbuf): *in is what the host collective reads (the staged send buffer, or the staged
// receive buffer in place), *out where it writes (staging buffer 1 when recvbuf is on the
// device). False when a copy failed (s.rc() says why).
bool stage_reduction_inputs(Staged& s, unsigned dev, const void* sendbuf, void* recvbuf,
                            size_t bytes, const void** in, void** out) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  *in = in_place ? recvbuf : sendbuf;
  *out = recvbuf;
  if (dev & 2u) {
    *out = s.buffer(1, bytes);
    if (in_place) {
      s.to_host(*out, recvbuf, bytes);
      *in = *out;
    }
  }
  if (dev & 1u) {
    uint8_t* staged = s.buffer(0, bytes);
    s.to_host(staged, sendbuf, bytes);
    *in = staged;
  }
  s.sync();
  return !s.failed();
}

}  // namespace skipring::api
