// The C API: argument checking, MPI handle mapping, per-communicator state cached as an MPI
// attribute, process-wide totals. Nothing thrown crosses these functions.
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/api_internal.h"
#include "runtime/communicator.h"
#include "runtime/config.h"
#include "runtime/device_ops.h"
#include "runtime/include/skipring/skipring.h"
#include "runtime/log.h"
#include "runtime/memtype.h"
#include "runtime/mpi_types.h"
#include "straggler/injection.h"
#include "straggler/msglog.h"
#include "straggler/trace.h"

namespace skipring {
namespace {

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

struct GlobalState {
  std::mutex mutex;
  bool initialised = false;
  int init_error = MPI_SUCCESS;
  int keyval = MPI_KEYVAL_INVALID;
  int self_keyval = MPI_KEYVAL_INVALID;
  std::map<Communicator*, MPI_Comm> comms;  // live states and the communicator they hang on
  // Process-wide totals: atomics, so the per-call path takes no lock.
  std::atomic<uint64_t> calls{0}, fallbacks{0}, skips{0}, late{0}, bytes{0}, time_ns{0};
  // Fallbacks by reason (skipring_fallback_reason_t; they add up to `fallbacks`) and the calls
  // run by the MPI library's all-reduce (the `mpi` algorithm).
  std::atomic<uint64_t> fallback_by[SKIPRING_FALLBACK_REASONS] = {};
  std::atomic<uint64_t> mpi_calls{0};
  std::atomic<bool> tracing{false};    // trace != nullptr (read without the lock)
  InjectPlan inject;                   // SKIPRING_INJECT or skipring_set_inject()
  std::unique_ptr<TraceWriter> trace;  // SKIPRING_TRACE
  std::unique_ptr<MessageLog> msglog;  // SKIPRING_MSGLOG (message_log() points at it)
  // Staging buffers of the communicators that staged device buffers (guarded by mutex).
  std::map<Communicator*, std::unique_ptr<StagingPool>> staging;
};

// Set once init succeeded: the per-call fast path skips the lock. Cleared again when
// MPI_Finalize starts (on_self_delete), so later calls take the slow path and fail there.
std::atomic<bool> g_ready{false};
// Set when MPI_Finalize deletes MPI_COMM_SELF's attributes: from then on no MPI call is made.
std::atomic<bool> g_finalized{false};

GlobalState& state() {
  static GlobalState* s = new GlobalState();  // never destroyed: used from MPI_Finalize hooks
  return *s;
}

// The names of the fallback reasons (skipring_get_counter, the report line, the info log).
constexpr const char* kFallbackNames[SKIPRING_FALLBACK_REASONS] = {
    "fallback_datatype", "fallback_op",    "fallback_comm",  "fallback_memory",
    "fallback_disabled", "fallback_other", "fallback_thread"};
constexpr const char* kFallbackWhy[SKIPRING_FALLBACK_REASONS] = {
    "a datatype skipring does not reduce (derived, complex, pair, ...)",
    "an op skipring does not run (user-defined, MINLOC/MAXLOC, REPLACE, ...)",
    "an inter-communicator",
    "device buffers without a device path",
    "SKIPRING_ENABLE=0",
    "the caller's own count",
    "a nonblocking call without MPI_THREAD_MULTIPLE (the progress thread needs it)"};

// --- Nonblocking all-reduce (issue 40): the progress thread ------------------------------
// One worker thread per process runs the nonblocking all-reduces skipring runs itself, in
// submission order, each exactly as the blocking call would (Communicator::allreduce:
// skip-ahead, late arrivals, the cost model), and completes the generalized request the caller
// holds (MPI_Grequest_start): MPI_Wait, MPI_Test and their families work on it unchanged, and
// the program computes meanwhile. Only under MPI_THREAD_MULTIPLE (the worker calls MPI while the
// program may). A communicator with pending nonblocking calls is drained before any other
// skipring call runs on it (comm_state), before it is freed, and the worker is stopped at
// MPI_Finalize; calls on other communicators go on meanwhile (MPI orders collectives per
// communicator only: draining every communicator could deadlock a legal program).
struct NbJob {
  Communicator* c = nullptr;
  const void* src = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dt = DType::kInt8;
  ROp rop = ROp::kSum;
  MPI_Request greq = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
};
void run_nb_job(NbJob* job);  // runs it and completes its request (below)

// Jobs submitted and not yet finished, all communicators (the per-call check is one load).
std::atomic<int> g_nb_pending{0};

class NbWorker {
 public:
  void submit(NbJob* job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread([this] { loop(); });
    }
    queue_.push_back(job);
    ++pending_[job->c];
    g_nb_pending.fetch_add(1, std::memory_order_release);
    work_.notify_one();
  }
  // Returns once no job of `c` is queued or running.
  void drain(Communicator* c) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_.find(c) == pending_.end(); });
  }
  // Runs what is queued, then ends the thread (MPI_Finalize).
  void stop() {
    std::thread t;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_.empty(); });
      stop_ = true;
      work_.notify_one();
      t = std::move(thread_);
    }
    if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      NbJob* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_
        job = queue_.front();
        queue_.pop_front();
      }
      Communicator* c = job->c;
      run_nb_job(job);  // the caller may free job from here on (its wait returned)
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--pending_[c] == 0) pending_.erase(c);
        g_nb_pending.fetch_sub(1, std::memory_order_release);
      }
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<NbJob*> queue_;
  std::map<Communicator*, int> pending_;
  std::thread thread_;
  bool stop_ = false;
};

NbWorker& nb_worker() {
  static NbWorker* w = new NbWorker();  // never destroyed: stopped at MPI_Finalize
  return *w;
}

// Waits for c's pending nonblocking calls (none: one relaxed load).
inline void drain_nonblocking(Communicator* c) {
  if (c != nullptr && g_nb_pending.load(std::memory_order_acquire) != 0) nb_worker().drain(c);
}

int to_mpi_error(Status s) {
  switch (s) {
    case Status::kOk:
      return MPI_SUCCESS;
    case Status::kErrCount:
      return MPI_ERR_COUNT;
    case Status::kErrBuffer:
      return MPI_ERR_BUFFER;
    case Status::kErrOp:
      return MPI_ERR_OP;
    case Status::kErrType:
      return MPI_ERR_TYPE;
    case Status::kErrComm:
      return MPI_ERR_COMM;
    case Status::kErrArg:
    case Status::kErrConfig:
      return MPI_ERR_ARG;
    case Status::kErrNoMem:
      return MPI_ERR_NO_MEM;
    default:
      return MPI_ERR_OTHER;
  }
}

// The last communicator this thread used and its state: an attribute lookup costs tens of
// nanoseconds, a noticeable part of a small all-reduce. Any state deletion bumps the
// generation, which invalidates every thread's entry (a freed MPI_Comm handle can be reused).
std::atomic<uint64_t> g_comm_generation{1};
struct CommCache {
  MPI_Comm comm = MPI_COMM_NULL;
  Communicator* state = nullptr;
  uint64_t generation = 0;
};
// Not initial-exec TLS (which would save a __tls_get_addr call per access): libskipring.so is
// also dlopen'ed (Python's skipring_torch extension), and after PyTorch glibc's static TLS
// surplus is gone ("cannot allocate memory in static TLS block").
thread_local CommCache t_comm_cache;

int delete_comm_state(MPI_Comm, int, void* attr, void*) {
  g_comm_generation.fetch_add(1, std::memory_order_acq_rel);
  auto* c = static_cast<Communicator*>(attr);
  drain_nonblocking(c);  // MPI lets a communicator with pending operations be freed
  {
    // Its fast-path calls stay in the process totals.
    const Communicator::FastTotals& f = c->fast_totals();
    const uint64_t calls = f.calls.load(std::memory_order_relaxed);
    state().calls.fetch_add(calls, std::memory_order_relaxed);
    state().mpi_calls.fetch_add(calls, std::memory_order_relaxed);
    state().bytes.fetch_add(f.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  std::unique_ptr<StagingPool> pool;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().comms.erase(c);
    auto it = state().staging.find(c);
    if (it != state().staging.end()) {
      pool = std::move(it->second);
      state().staging.erase(it);
    }
  }
  pool.reset();
  delete c;
  return MPI_SUCCESS;
}

void free_all_states() {
  std::map<Communicator*, MPI_Comm> comms;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    comms = state().comms;
  }
  for (auto& [c, comm] : comms) MPI_Comm_delete_attr(comm, state().keyval);
}

// SKIPRING_TRACE's and SKIPRING_MSGLOG's files, at finalize.
void close_outputs() {
  std::unique_ptr<TraceWriter> t;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    t = std::move(state().trace);
    state().tracing.store(false, std::memory_order_release);
  }
  if (t) t->close();
  set_message_log(nullptr);
  std::unique_ptr<MessageLog> m;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    m = std::move(state().msglog);
  }
  if (m && !ok(m->close())) {
    std::fprintf(stderr, "[skipring] error: SKIPRING_MSGLOG: writing %s failed\n",
                 m->path().c_str());
  }
}

// The fast-path calls and bytes of the live communicators (freed ones are in the totals).
std::pair<uint64_t, uint64_t> live_fast_totals() {
  std::lock_guard<std::mutex> lock(state().mutex);
  uint64_t calls = 0, bytes = 0;
  for (const auto& [c, comm] : state().comms) {
    calls += c->fast_totals().calls.load(std::memory_order_relaxed);
    bytes += c->fast_totals().bytes.load(std::memory_order_relaxed);
  }
  return {calls, bytes};
}

// At finalize, at info level: what went to the MPI library and why.
void log_fallbacks() {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  const GlobalState& g = state();
  std::string by;
  for (int r = 0; r < SKIPRING_FALLBACK_REASONS; ++r) {
    by +=
        fmt::format(" {}={}", kFallbackNames[r], g.fallback_by[r].load(std::memory_order_relaxed));
  }
  SKIPRING_LOG_INFO(
      "{} calls in skipring ({} of them by the MPI library's all-reduce, the mpi "
      "algorithm), {} handed to the MPI library:{}",
      g.calls.load(std::memory_order_relaxed) + live_fast_totals().first,
      g.mpi_calls.load(std::memory_order_relaxed) + live_fast_totals().first,
      g.fallbacks.load(std::memory_order_relaxed), by);
}

int on_self_delete(MPI_Comm, int, void*, void*) {
  nb_worker().stop();
  log_fallbacks();
  g_finalized.store(true, std::memory_order_release);
  g_ready.store(false, std::memory_order_release);
  free_all_states();
  close_outputs();
  return MPI_SUCCESS;
}

int init_locked() {
  GlobalState& g = state();
  if (g.initialised) return g.init_error;
  int mpi_init = 0, mpi_fin = 0;
  MPI_Initialized(&mpi_init);
  MPI_Finalized(&mpi_fin);
  if (!mpi_init || mpi_fin) return MPI_ERR_OTHER;  // not latched: MPI may come up later
  g.initialised = true;
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string error;
  if (!ok(init_global_config(&error))) {
    std::fprintf(stderr, "[skipring r%d] error: %s\n", world_rank, error.c_str());
    g.init_error = MPI_ERR_ARG;
    return g.init_error;
  }
  configure_logging(world_rank, global_config().log_level);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (!ok(InjectPlan::parse(global_config().inject, &g.inject, &error)) ||
      !ok(g.inject.check_ranks(world_size, &error))) {
    g.inject = InjectPlan();
    std::fprintf(stderr, "[skipring r%d] error: %s\n", world_rank, error.c_str());
    g.init_error = MPI_ERR_ARG;
    return g.init_error;
  }
  if (!global_config().trace_dir.empty() &&
      !ok(TraceWriter::open(global_config().trace_dir, world_rank, &g.trace, &error))) {
    std::fprintf(stderr, "[skipring r%d] error: SKIPRING_TRACE: %s\n", world_rank, error.c_str());
    g.init_error = MPI_ERR_ARG;
    return g.init_error;
  }
  g.tracing.store(g.trace != nullptr, std::memory_order_release);
  if (!global_config().msglog_dir.empty()) {
    if (!ok(MessageLog::open(global_config().msglog_dir, world_rank, &g.msglog, &error))) {
      std::fprintf(stderr, "[skipring r%d] error: SKIPRING_MSGLOG: %s\n", world_rank,
                   error.c_str());
      g.init_error = MPI_ERR_ARG;
      return g.init_error;
    }
    set_message_log(g.msglog.get());
  }
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_comm_state, &g.keyval, nullptr);
  // Attributes on MPI_COMM_SELF are deleted first thing in MPI_Finalize: free everything then.
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_self_delete, &g.self_keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, g.self_keyval, nullptr);
  SKIPRING_LOG_DEBUG("initialised");
  g_ready.store(true, std::memory_order_release);
  return MPI_SUCCESS;
}

// MPI_Initialized and MPI_Finalized may be called at any time; nothing else may be called
// before MPI_Init or after MPI_Finalize (Open MPI and MPICH abort the job). A skipring call
// then returns MPI_ERR_OTHER with a message naming the function, and makes no MPI call.
int mpi_inactive_error(const char* fn) {
  int mpi_init = 0, mpi_fin = 0;
  MPI_Initialized(&mpi_init);
  MPI_Finalized(&mpi_fin);
  const char* when = nullptr;
  if (!mpi_init) {
    when = "before MPI_Init";
  } else if (mpi_fin || g_finalized.load(std::memory_order_acquire)) {
    when = "after MPI_Finalize";
  } else {
    return MPI_SUCCESS;
  }
  SKIPRING_LOG_ERROR("{} called {}: returns MPI_ERR_OTHER (MPI is not active)", fn, when);
  return MPI_ERR_OTHER;
}

// Loads the configuration on the first call; MPI_ERR_OTHER (and a message naming `fn`) when
// MPI is not active, the init error on a bad SKIPRING_* value.
int ensure_init(const char* fn) {
  if (g_ready.load(std::memory_order_acquire)) return MPI_SUCCESS;
  if (int rc = mpi_inactive_error(fn); rc != MPI_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(state().mutex);
  return init_locked();
}

const char* error_name(int code) {
  switch (code) {
    case MPI_ERR_BUFFER:
      return "MPI_ERR_BUFFER";
    case MPI_ERR_ARG:
      return "MPI_ERR_ARG";
    default:
      return "an MPI error";
  }
}

// Logs why a call's arguments are rejected and returns `code`. The codes are those of Open
// MPI's own argument checks for the same call (skipring.h lists them).
int reject(const char* fn, int code, const char* why) {
  SKIPRING_LOG_ERROR("{}: {}: returns {}", fn, why, error_name(code));
  return code;
}

// sendbuf and recvbuf the same buffer without MPI_IN_PLACE: erroneous in MPI (aliased
// arguments). MPI_BOTTOM is exempt (absolute addresses in a derived datatype).
bool aliased(const void* sendbuf, const void* recvbuf, int count) {
  return count > 0 && sendbuf == recvbuf && sendbuf != MPI_BOTTOM && sendbuf != MPI_IN_PLACE;
}

// The input and output ranges of `bytes` each overlap without being the same buffer (that is
// aliased()'s case): erroneous in MPI (the output must not share storage with the input), and
// the result would depend on when each part is read.
bool overlapping(const void* sendbuf, const void* recvbuf, size_t bytes) {
  if (bytes == 0 || sendbuf == recvbuf || sendbuf == nullptr || recvbuf == nullptr) return false;
  const auto s = reinterpret_cast<uintptr_t>(sendbuf);
  const auto r = reinterpret_cast<uintptr_t>(recvbuf);
  return s < r + bytes && r < s + bytes;
}

constexpr const char* kOverlapWhy =
    "sendbuf and recvbuf overlap (aliasing is erroneous in MPI; pass MPI_IN_PLACE as sendbuf "
    "for an in-place call)";

constexpr const char* kAliasWhy =
    "sendbuf and recvbuf are the same buffer (aliasing is erroneous in MPI; pass MPI_IN_PLACE "
    "as sendbuf for an in-place call)";

// Finds or creates the state for `comm` (collective on first use).
// drain: first wait for the communicator's pending nonblocking calls (every entry point but
// skipring_iallreduce, which queues behind them).
int comm_state(MPI_Comm comm, bool create, Communicator** out, bool drain = true) {
  CommCache& cache = t_comm_cache;
  const uint64_t generation = g_comm_generation.load(std::memory_order_acquire);
  if (cache.comm == comm && cache.generation == generation && comm != MPI_COMM_NULL) {
    *out = cache.state;
    if (drain) drain_nonblocking(*out);
    return MPI_SUCCESS;
  }
  void* attr = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(comm, state().keyval, &attr, &found) != MPI_SUCCESS) return MPI_ERR_COMM;
  if (found) {
    *out = static_cast<Communicator*>(attr);
    cache = CommCache{comm, *out, generation};
    if (drain) drain_nonblocking(*out);
    return MPI_SUCCESS;
  }
  *out = nullptr;
  if (!create) return MPI_SUCCESS;
  std::unique_ptr<Communicator> c;
  Status st = Communicator::create(comm, global_config(), state().inject, &c);
  if (!ok(st)) return to_mpi_error(st);
  if (MPI_Comm_set_attr(comm, state().keyval, c.get()) != MPI_SUCCESS) return MPI_ERR_OTHER;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().comms[c.get()] = comm;
  }
  *out = c.release();
  return MPI_SUCCESS;
}

// Adds a finished collective to the totals and the trace.
void account(const CollectiveStats& s) {
  GlobalState& g = state();
  if (g.tracing.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.trace) g.trace->add(s);
  }
  g.calls.fetch_add(1, std::memory_order_relaxed);
  if (s.algo == static_cast<int>(Algo::kMpi)) g.mpi_calls.fetch_add(1, std::memory_order_relaxed);
  if (s.skips) g.skips.fetch_add(s.skips, std::memory_order_relaxed);
  if (s.late_pieces) g.late.fetch_add(s.late_pieces, std::memory_order_relaxed);
  g.bytes.fetch_add(s.bytes, std::memory_order_relaxed);
  const double t = s.time_s();
  if (t > 0) g.time_ns.fetch_add(static_cast<uint64_t>(t * 1e9), std::memory_order_relaxed);
}

// Counts one fallback of `fn` with its reason; the first of each reason is said at info level.
void count_fallback(int reason, const char* fn) {
  if (reason < 0 || reason >= SKIPRING_FALLBACK_REASONS) reason = SKIPRING_FALLBACK_OTHER;
  GlobalState& g = state();
  g.fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (g.fallback_by[reason].fetch_add(1, std::memory_order_relaxed) == 0 && fn != nullptr) {
    SKIPRING_LOG_INFO(
        "{}: handed to the MPI library: {} (the first such call; later ones are counted in "
        "{} of the report line)",
        fn, kFallbackWhy[reason], kFallbackNames[reason]);
  }
}

// Why a reduction goes to PMPI: disabled, the datatype, or the op (classify_reduction said
// kOther).
int reduction_fallback_reason(MPI_Datatype datatype) {
  if (!global_config().enable) return SKIPRING_FALLBACK_DISABLED;
  DType dt;
  return dtype_from_mpi(datatype, &dt) ? SKIPRING_FALLBACK_OP : SKIPRING_FALLBACK_DATATYPE;
}

// The (datatype, op) pair as skipring sees it (classify_reduction); kOther while disabled.
// The last native pair this thread classified: an application repeats its (type, op), and the
// classification walks the type list (~50 instructions per call, a tenth of the small sizes'
// per-call overhead). Only native pairs are kept: their handles are predefined (or skipring's
// own 16-bit types, never freed), so a handle equal to one is that type; a freed derived type's
// handle, reused by MPI, can never match.
struct LastReduction {
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  DType dt = DType::kInt8;
  ROp rop = ROp::kSum;
};
thread_local LastReduction t_last_reduction;

MpiReduction reduction_of(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop) {
  if (!global_config().enable) return MpiReduction::kOther;
  LastReduction& last = t_last_reduction;
  if (datatype == last.datatype && op == last.op && datatype != MPI_DATATYPE_NULL) {
    *dt = last.dt;
    *rop = last.rop;
    return MpiReduction::kNative;
  }
  const MpiReduction kind = classify_reduction(datatype, op, dt, rop);
  if (kind == MpiReduction::kNative) last = LastReduction{datatype, op, *dt, *rop};
  return kind;
}

bool intra_comm(MPI_Comm comm) {
  int inter = 0;
  return MPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter;
}

// True when skipring runs collectives on `comm` itself: it has skipring state already (checked
// when the state was created) or is an intra-communicator.
bool native_comm(MPI_Comm comm) {
  void* attr = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(comm, state().keyval, &attr, &found) == MPI_SUCCESS && found) return true;
  return intra_comm(comm);
}

bool handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, DType* dt, ROp* rop) {
  return reduction_of(datatype, op, dt, rop) == MpiReduction::kNative && native_comm(comm);
}

// --- Device buffers (docs/gpu.md) ---------------------------------------------------------
// Every buffer of every collective is classified (runtime/memtype.h). Device and managed
// buffers never reach CPU code: with a device path (device_ops(): CUDA with a device, or a
// test's fake) they are copied through the communicator's pinned staging buffers and the
// normal host collective runs on those (skip-ahead, late arrival and injection unchanged);
// without one (SKIPRING_GPU_STAGING=0, no CUDA, no device) the call goes to the MPI library,
// counted as a fallback. Every rank must pass the same kind of memory to a given call.

// Which of `bufs` are device or managed memory: bit i for bufs[i] (0: all host).
unsigned device_buffers(std::initializer_list<const void*> bufs) {
  unsigned mask = 0, bit = 1;
  for (const void* p : bufs) {
    if (!host_accessible(classify_memory(p))) mask |= bit;
    bit <<= 1;
  }
  return mask;
}

// The device path for a call with device buffers, or nullptr (the call goes to PMPI). Said once
// per process at info level (a CUDA-aware application passes device buffers on every call).
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

// One staged collective: the communicator's staging pool, copies queued on its stream, the
// first error kept (later steps do nothing then). Device pointers are only handed to `ops`.
class Staged {
 public:
  Staged(const char* fn, Communicator* c, DeviceOps* ops) : fn_(fn) {
    GlobalState& g = state();
    std::lock_guard<std::mutex> lock(g.mutex);
    std::unique_ptr<StagingPool>& pool = g.staging[c];
    if (pool == nullptr || pool->ops() != ops) {  // a test may swap implementations
      pool.reset();
      auto fresh = std::make_unique<StagingPool>(ops);
      if (fail(fresh->init(), "creating the staging stream", ops)) return;
      pool = std::move(fresh);
    }
    pool_ = pool.get();
  }

  bool failed() const { return rc_ != MPI_SUCCESS; }
  int rc() const { return rc_; }

  // Pinned buffer `which` (0 inputs, 1 outputs) of `bytes`; nullptr after an error.
  uint8_t* buffer(int which, size_t bytes) {
    uint8_t* p = nullptr;
    if (!failed()) fail(pool_->buffer(which, bytes, &p), "allocating pinned host memory");
    return failed() ? nullptr : p;
  }
  void to_host(void* host, const void* dev, size_t bytes) {
    if (!failed()) {
      fail(pool_->ops()->copy_to_host_async(host, dev, bytes, pool_->stream()),
           "copying device to host");
    }
  }
  void to_device(void* dev, const void* host, size_t bytes) {
    if (!failed()) {
      fail(pool_->ops()->copy_to_device_async(dev, host, bytes, pool_->stream()),
           "copying host to device");
    }
  }
  void sync() {
    if (!failed()) fail(pool_->ops()->stream_sync(pool_->stream()), "waiting for the copies");
  }

 private:
  // Records a failed step: logged with the device's reason, the call returns an MPI error.
  bool fail(Status st, const char* what, DeviceOps* ops = nullptr) {
    if (ok(st)) return false;
    if (ops == nullptr) ops = pool_->ops();
    SKIPRING_LOG_ERROR("{}: device staging failed {}: {} ({}): returns an MPI error", fn_, what,
                       status_string(st), ops->last_error());
    rc_ = to_mpi_error(st);
    return true;
  }

  const char* fn_;
  StagingPool* pool_ = nullptr;
  int rc_ = MPI_SUCCESS;
};

// skipring's 16-bit float types are pairs of bytes to MPI: PMPI cannot reduce them with a
// predefined op, so a reduction that would fall back fails here, saying why (MPI_ERR_TYPE), and
// MPI_SUCCESS means the fallback may go ahead.
int extension_fallback_error(const char* fn, MPI_Datatype datatype, MPI_Op op) {
  ROp rop;
  if (!is_extension_type(datatype) || !rop_from_mpi(op, &rop)) return MPI_SUCCESS;
  return reject(fn, MPI_ERR_TYPE,
                "skipring's float16/bfloat16 datatypes are reduced by skipring only, and this call "
                "would go to PMPI (SKIPRING_ENABLE=0, an inter-communicator, or device buffers "
                "without a device path)");
}

int fallback(int reason, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
             MPI_Op op, MPI_Comm comm) {
  if (int rc = extension_fallback_error("skipring_allreduce", datatype, op); rc != MPI_SUCCESS) {
    return rc;
  }
  count_fallback(reason, "skipring_allreduce");
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

// The staged collectives. `dev` has bit 0 for sendbuf and bit 1 for recvbuf (bcast: bit 0 for
// buffer) when that buffer is device memory; the others are passed to the collective as they
// are. Inputs are copied to pinned buffer 0 (in place: to buffer 1, which then holds input and
// result), the stream is synchronised, the host collective runs, results are copied back and
// synchronised again before returning. The call counts as a skipring call.

// The end of a staged collective: its status, accounted when it ran; then the copies back.
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

int staged_allreduce(Communicator* c, DeviceOps* ops, unsigned dev, const void* sendbuf,
                     void* recvbuf, int count, DType dt, ROp rop) {
  Staged s("skipring_allreduce", c, ops);
  const size_t n = static_cast<size_t>(count);
  const size_t bytes = n * dtype_size(dt);
  const void* in = nullptr;
  void* out = nullptr;
  if (!stage_reduction_inputs(s, dev, sendbuf, recvbuf, bytes, &in, &out)) return s.rc();
  return staged_result(s, c, c->allreduce(in, out, n, dt, rop), (dev & 2u) ? recvbuf : nullptr, out,
                       bytes);
}

int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_allreduce"); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, false, &c); rc != MPI_SUCCESS) return rc;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_BUFFER, also with both in place).
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_allreduce", MPI_ERR_BUFFER,
                  sendbuf == MPI_IN_PLACE ? "sendbuf and recvbuf are both MPI_IN_PLACE (only "
                                            "sendbuf may be)"
                                          : "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, count)) {
    return reject("skipring_allreduce", MPI_ERR_BUFFER, kAliasWhy);
  }
  if (kind == MpiReduction::kNative && sendbuf != MPI_IN_PLACE &&
      overlapping(sendbuf, recvbuf, static_cast<size_t>(count) * dtype_size(dt))) {
    return reject("skipring_allreduce", MPI_ERR_BUFFER, kOverlapWhy);
  }
  const unsigned dev = count > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_allreduce") : nullptr;
  if (dev != 0 && ops == nullptr) {
    return fallback(SKIPRING_FALLBACK_MEMORY, sendbuf, recvbuf, count, datatype, op, comm);
  }
  // A communicator that already has skipring state is an intra-communicator (checked when the
  // state was created): the per-call path skips native_comm's MPI calls.
  if (kind != MpiReduction::kNative) {
    return fallback(reduction_fallback_reason(datatype), sendbuf, recvbuf, count, datatype, op,
                    comm);
  }
  if (c == nullptr && !native_comm(comm)) {
    return fallback(SKIPRING_FALLBACK_COMM, sendbuf, recvbuf, count, datatype, op, comm);
  }
  if (count > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (c == nullptr) {
    if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  }
  if (dev != 0) return staged_allreduce(c, ops, dev, sendbuf, recvbuf, count, dt, rop);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
  if (c->mpi_cached(bytes, dt, rop)) {
    // auto hands this size to the MPI library (the `mpi` row) and chose so before: the call
    // goes straight to PMPI_Allreduce with the caller's buffers and communicator, as without
    // skipring (issue 40: everything else skipring does per call cost as much as the MPI's 8-byte
    // all-reduce on shared memory). Errors are the MPI library's, raised on comm's handler.
    // skipring's own (fixed-width) type and op, as the `mpi` row's slow path: Open MPI 4.1.4
    // reduces MPI_UNSIGNED_LONG with MIN/MAX as signed.
    const int rc = PMPI_Allreduce(sendbuf, recvbuf, count, mpi_datatype(dt), mpi_op(rop), comm);
    if (rc != MPI_SUCCESS) return rc;
    // Counted on the communicator (no locked instruction; the totals add them up), not timed,
    // not traced (no steps).
    c->count_mpi_call(bytes);
    return MPI_SUCCESS;
  }
  // A broken communicator refuses the call itself, saying why (Communicator::refuse_broken).
  Status st = c->allreduce(src, recvbuf, static_cast<size_t>(count), dt, rop);
  if (!ok(st)) return to_mpi_error(st);
  account(c->last_stats());
  return MPI_SUCCESS;
}

// The generalized request's callbacks (MPI-3.1 12.2): the status of a finished all-reduce (no
// elements, not cancelled; its error class if it failed), the job freed with the request, and no
// cancelling (a collective cannot be cancelled: the call is a no-op, as MPI allows).
int nb_query(void* extra, MPI_Status* status) {
  const auto* job = static_cast<const NbJob*>(extra);
  MPI_Status_set_elements(status, MPI_BYTE, 0);
  MPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = job->rc;
  return job->rc;
}
int nb_free(void* extra) {
  delete static_cast<NbJob*>(extra);
  return MPI_SUCCESS;
}
int nb_cancel(void*, int) { return MPI_SUCCESS; }

void run_nb_job(NbJob* job) {
  int rc = MPI_ERR_OTHER;
  try {
    const Status st = job->c->allreduce(job->src, job->recv, job->count, job->dt, job->rop);
    if (ok(st)) account(job->c->last_stats());
    rc = to_mpi_error(st);
  } catch (const std::bad_alloc&) {
    rc = MPI_ERR_NO_MEM;
  } catch (...) {
    rc = MPI_ERR_OTHER;
  }
  job->rc = rc;
  MPI_Grequest_complete(job->greq);
}

// The MPI library's own nonblocking all-reduce, counted as a fallback with `reason` (-1: not a
// fallback, the `mpi` row's small sizes).
int pmpi_iallreduce(int reason, const void* sendbuf, void* recvbuf, int count,
                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  if (int rc = extension_fallback_error("skipring_iallreduce", datatype, op); rc != MPI_SUCCESS) {
    return rc;
  }
  if (reason >= 0) count_fallback(reason, "skipring_iallreduce");
  return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

int iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr) return MPI_ERR_REQUEST;
  *request = MPI_REQUEST_NULL;
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_iallreduce"); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, false, &c, false); rc != MPI_SUCCESS) return rc;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_iallreduce", MPI_ERR_BUFFER,
                  sendbuf == MPI_IN_PLACE ? "sendbuf and recvbuf are both MPI_IN_PLACE (only "
                                            "sendbuf may be)"
                                          : "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, count)) {
    return reject("skipring_iallreduce", MPI_ERR_BUFFER, kAliasWhy);
  }
  if (kind == MpiReduction::kNative && sendbuf != MPI_IN_PLACE &&
      overlapping(sendbuf, recvbuf, static_cast<size_t>(count) * dtype_size(dt))) {
    return reject("skipring_iallreduce", MPI_ERR_BUFFER, kOverlapWhy);
  }
  const unsigned dev = count > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  if (dev != 0) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_MEMORY, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (kind != MpiReduction::kNative) {
    return pmpi_iallreduce(reduction_fallback_reason(datatype), sendbuf, recvbuf, count, datatype,
                           op, comm, request);
  }
  if (c == nullptr && !native_comm(comm)) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_COMM, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (count > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_THREAD, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (c == nullptr) {
    // Collective setup, in the caller's thread and call order (nothing is pending on it).
    if (int rc = comm_state(comm, true, &c, false); rc != MPI_SUCCESS) return rc;
  }
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
  if (g_nb_pending.load(std::memory_order_acquire) == 0 && c->mpi_cached(bytes, dt, rop)) {
    // The small sizes auto hands to the MPI library: its own nonblocking all-reduce (only with
    // the worker idle: the communicator's state is then this thread's alone).
    const int rc =
        PMPI_Iallreduce(sendbuf, recvbuf, count, mpi_datatype(dt), mpi_op(rop), comm, request);
    if (rc == MPI_SUCCESS) c->count_mpi_call(bytes);
    return rc;
  }
  auto job = std::make_unique<NbJob>();
  job->c = c;
  job->src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  job->recv = recvbuf;
  job->count = static_cast<size_t>(count);
  job->dt = dt;
  job->rop = rop;
  if (int rc = MPI_Grequest_start(nb_query, nb_free, nb_cancel, job.get(), &job->greq);
      rc != MPI_SUCCESS) {
    return rc;
  }
  *request = job->greq;
  nb_worker().submit(job.release());  // freed by nb_free when the request is
  return MPI_SUCCESS;
}

// --- reduce-scatter (block), allgather, broadcast, reduce -------------------------------
// Same pattern as allreduce: MPI's argument errors first, then PMPI for what skipring does
// not run natively, then the communicator's collective.

// The collectives without a reduction (allgather, bcast): the type alone decides.
bool handles_type(MPI_Datatype datatype, MPI_Comm comm, DType* dt) {
  return global_config().enable && dtype_from_mpi(datatype, dt) && intra_comm(comm);
}

void account(Communicator* c) { account(c->last_stats()); }

// Why a collective without a reduction goes to PMPI (handles_type or the memory said no);
// `same`: the send and receive types and counts match.
int type_fallback_reason(bool same, MPI_Datatype datatype, bool memory) {
  DType dt;
  if (!global_config().enable) return SKIPRING_FALLBACK_DISABLED;
  if (!same || !dtype_from_mpi(datatype, &dt)) return SKIPRING_FALLBACK_DATATYPE;
  return memory ? SKIPRING_FALLBACK_MEMORY : SKIPRING_FALLBACK_COMM;
}

int root_error(int root, MPI_Comm comm) {
  int size = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS) return MPI_ERR_COMM;
  return root < 0 || root >= size ? MPI_ERR_ROOT : MPI_SUCCESS;
}

// The native path's common tail: the communicator's state (created on first use), then `call`
// (Status (Communicator*)) unless the communicator is broken, then the stats.
template <typename F>
int run_native(MPI_Comm comm, F&& call) {
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  Status st = call(c);  // refused, saying why, when the communicator is broken
  if (!ok(st)) return to_mpi_error(st);
  account(c);
  return MPI_SUCCESS;
}

// The staged form of run_native: `body` (int (Staged&, Communicator*)) stages, runs the
// collective and returns an MPI error code (staged_result).
template <typename F>
int run_staged(MPI_Comm comm, const char* fn, DeviceOps* ops, F&& body) {
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  Staged s(fn, c, ops);
  if (s.failed()) return s.rc();
  return body(s, c);
}

int reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (recvcount < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_reduce_scatter_block"); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_ARG). Open MPI does not check
  // aliasing here; skipring rejects it as skipring_allreduce does (MPI_ERR_BUFFER).
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce_scatter_block", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, recvcount)) {
    return reject("skipring_reduce_scatter_block", MPI_ERR_BUFFER, kAliasWhy);
  }
  const unsigned dev = recvcount > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_reduce_scatter_block") : nullptr;
  if (kind != MpiReduction::kNative || !native_comm(comm) || (dev != 0 && ops == nullptr)) {
    if (int rc = extension_fallback_error("skipring_reduce_scatter_block", datatype, op);
        rc != MPI_SUCCESS) {
      return rc;
    }
    count_fallback(kind != MpiReduction::kNative ? reduction_fallback_reason(datatype)
                   : dev != 0 && ops == nullptr  ? SKIPRING_FALLBACK_MEMORY
                                                 : SKIPRING_FALLBACK_COMM,
                   "skipring_reduce_scatter_block");
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  }
  if (recvcount > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_reduce_scatter_block", ops, [&](Staged& s, Communicator* c) {
      const size_t block = static_cast<size_t>(recvcount) * dtype_size(dt);
      const size_t total = block * static_cast<size_t>(c->size());
      const bool in_place = sendbuf == MPI_IN_PLACE;
      const void* in = src;
      void* out = recvbuf;
      if (dev & 2u) {
        out = s.buffer(1, in_place ? total : block);
        if (in_place) {
          s.to_host(out, recvbuf, total);
          in = out;
        }
      }
      if (dev & 1u) {
        uint8_t* staged = s.buffer(0, total);
        s.to_host(staged, sendbuf, total);
        in = staged;
      }
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->reduce_scatter_block(in, out, static_cast<size_t>(recvcount), dt, rop);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, block);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->reduce_scatter_block(src, recvbuf, static_cast<size_t>(recvcount), dt, rop);
  });
}

int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (recvcount < 0 || (sendbuf != MPI_IN_PLACE && sendcount < 0)) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_allgather"); rc != MPI_SUCCESS) return rc;
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_ARG). Open MPI does not check
  // aliasing here; skipring rejects it as skipring_allreduce does (MPI_ERR_BUFFER).
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_allgather", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, recvcount)) {
    return reject("skipring_allgather", MPI_ERR_BUFFER, kAliasWhy);
  }
  DType dt;
  const bool same = sendbuf == MPI_IN_PLACE || (sendtype == recvtype && sendcount == recvcount);
  const unsigned dev = recvcount > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_allgather") : nullptr;
  if (!same || !handles_type(recvtype, comm, &dt) || (dev != 0 && ops == nullptr)) {
    count_fallback(type_fallback_reason(same, recvtype, dev != 0 && ops == nullptr),
                   "skipring_allgather");
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  if (recvcount > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_allgather", ops, [&](Staged& s, Communicator* c) {
      const size_t block = static_cast<size_t>(recvcount) * dtype_size(dt);
      const size_t total = block * static_cast<size_t>(c->size());
      const size_t mine = block * static_cast<size_t>(c->rank());
      const bool in_place = sendbuf == MPI_IN_PLACE;
      const void* in = src;
      uint8_t* out = static_cast<uint8_t*>(recvbuf);
      if (dev & 2u) {
        out = s.buffer(1, total);
        if (in_place) {  // this rank's block, at its place (an address only: never read here)
          s.to_host(out + mine, static_cast<const uint8_t*>(recvbuf) + mine, block);
          in = out;
        }
      }
      if (dev & 1u) {
        if (dev & 2u) {  // straight to its place in the staged result: the call runs in place
          s.to_host(out + mine, sendbuf, block);
          in = out;
        } else {
          uint8_t* staged = s.buffer(0, block);
          s.to_host(staged, sendbuf, block);
          in = staged;
        }
      }
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->allgather(in, out, static_cast<size_t>(recvcount), dt);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, total);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->allgather(src, recvbuf, static_cast<size_t>(recvcount), dt);
  });
}

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_bcast"); rc != MPI_SUCCESS) return rc;
  if (int rc = root_error(root, comm); rc != MPI_SUCCESS) return rc;
  // Broadcast has no in-place form (Open MPI: MPI_ERR_ARG).
  if (buffer == MPI_IN_PLACE) {
    return reject("skipring_bcast", MPI_ERR_ARG,
                  "buffer is MPI_IN_PLACE (bcast has no in-place form)");
  }
  DType dt;
  const unsigned dev = count > 0 ? device_buffers({buffer}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_bcast") : nullptr;
  if (!handles_type(datatype, comm, &dt) || (dev != 0 && ops == nullptr)) {
    count_fallback(type_fallback_reason(true, datatype, dev != 0 && ops == nullptr),
                   "skipring_bcast");
    return PMPI_Bcast(buffer, count, datatype, root, comm);
  }
  if (count > 0 && buffer == nullptr) return MPI_ERR_BUFFER;
  if (dev != 0) {
    // Only the root's buffer is read and only the others' is written.
    return run_staged(comm, "skipring_bcast", ops, [&](Staged& s, Communicator* c) {
      const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
      const bool is_root = c->rank() == root;
      uint8_t* staged = s.buffer(1, bytes);
      if (is_root) s.to_host(staged, buffer, bytes);
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->bcast(staged, static_cast<size_t>(count), dt, root);
      return staged_result(s, c, st, is_root ? nullptr : buffer, staged, bytes);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->bcast(buffer, static_cast<size_t>(count), dt, root);
  });
}

int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
           int root, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_reduce"); rc != MPI_SUCCESS) return rc;
  if (int rc = root_error(root, comm); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  int rank = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS) return MPI_ERR_COMM;
  // MPI_IN_PLACE only as sendbuf at the root; recvbuf is only significant at the root (a
  // non-root may pass anything there, MPI_IN_PLACE or sendbuf included). Open MPI returns
  // MPI_ERR_ARG for each of these.
  if (rank != root && sendbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce", MPI_ERR_ARG,
                  "sendbuf is MPI_IN_PLACE at a non-root rank (only the root may pass it)");
  }
  if (rank == root && recvbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE at the root (only sendbuf may be)");
  }
  if (rank == root && aliased(sendbuf, recvbuf, count)) {
    return reject("skipring_reduce", MPI_ERR_ARG, kAliasWhy);
  }
  const unsigned dev = count > 0 ? device_buffers({sendbuf, rank == root ? recvbuf : nullptr}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_reduce") : nullptr;
  if (kind != MpiReduction::kNative || !native_comm(comm) || (dev != 0 && ops == nullptr)) {
    if (int rc = extension_fallback_error("skipring_reduce", datatype, op); rc != MPI_SUCCESS) {
      return rc;
    }
    count_fallback(kind != MpiReduction::kNative ? reduction_fallback_reason(datatype)
                   : dev != 0 && ops == nullptr  ? SKIPRING_FALLBACK_MEMORY
                                                 : SKIPRING_FALLBACK_COMM,
                   "skipring_reduce");
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  }
  if (count > 0 && (sendbuf == nullptr || (rank == root && recvbuf == nullptr))) {
    return MPI_ERR_BUFFER;
  }
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_reduce", ops, [&](Staged& s, Communicator* c) {
      const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
      // recvbuf is significant at the root only (dev bit 1 is never set elsewhere).
      const void* in = nullptr;
      void* out = nullptr;
      if (!stage_reduction_inputs(s, dev, sendbuf, recvbuf, bytes, &in, &out)) return s.rc();
      const Status st = c->reduce(in, out, static_cast<size_t>(count), dt, rop, root);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, bytes);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->reduce(src, recvbuf, static_cast<size_t>(count), dt, rop, root);
  });
}

// Runs an entry point's body (returning an MPI error code) so that nothing thrown crosses the
// C ABI: std::bad_alloc becomes MPI_ERR_NO_MEM, any other exception MPI_ERR_OTHER. Every
// extern "C" function below and describe_selection go through it.
template <typename F>
int guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return to_mpi_error(Status::kErrNoMem);
  } catch (...) {
    return MPI_ERR_OTHER;
  }
}

}  // namespace

int describe_selection(MPI_Comm comm, size_t max_bytes, std::string* out) {
  return guarded([&]() -> int {
    if (int rc = ensure_init("describe_selection"); rc != MPI_SUCCESS) return rc;
    Communicator* c = nullptr;
    if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
    *out = c->describe_selection(max_bytes);
    return MPI_SUCCESS;
  });
}

}  // namespace skipring

using namespace skipring;

extern "C" {

int skipring_init(void) {
  return guarded([]() -> int { return ensure_init("skipring_init"); });
}

int skipring_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                       MPI_Op op, MPI_Comm comm) {
  return guarded([&]() -> int { return allreduce(sendbuf, recvbuf, count, datatype, op, comm); });
}

int skipring_iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                        MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return guarded(
      [&]() -> int { return iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request); });
}

int skipring_reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return guarded(
      [&] { return reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); });
}

int skipring_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                       int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return guarded(
      [&] { return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int skipring_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  return guarded([&]() -> int { return bcast(buffer, count, datatype, root, comm); });
}

int skipring_reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                    int root, MPI_Comm comm) {
  return guarded(
      [&]() -> int { return reduce(sendbuf, recvbuf, count, datatype, op, root, comm); });
}

MPI_Datatype skipring_type_float16(void) {
  try {
    return extension_type(DType::kFloat16);
  } catch (...) {
    return MPI_DATATYPE_NULL;
  }
}

MPI_Datatype skipring_type_bfloat16(void) {
  try {
    return extension_type(DType::kBfloat16);
  } catch (...) {
    return MPI_DATATYPE_NULL;
  }
}

int skipring_handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, int* handled) {
  return guarded([&]() -> int {
    if (handled == nullptr) return MPI_ERR_ARG;
    *handled = 0;
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    if (int rc = ensure_init("skipring_handles"); rc != MPI_SUCCESS) return rc;
    DType dt;
    ROp rop;
    *handled = handles(datatype, op, comm, &dt, &rop) ? 1 : 0;
    return MPI_SUCCESS;
  });
}

int skipring_last_stats(MPI_Comm comm, skipring_stats_t* out) {
  return guarded([&]() -> int {
    if (out == nullptr) return MPI_ERR_ARG;
    *out = skipring_stats_t{};
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    if (int rc = ensure_init("skipring_last_stats"); rc != MPI_SUCCESS) return rc;
    Communicator* c = nullptr;
    if (int rc = comm_state(comm, false, &c); rc != MPI_SUCCESS) return rc;
    if (c == nullptr) return MPI_SUCCESS;
    const CollectiveStats& s = c->last_stats();
    out->seq = s.seq;
    out->bytes = s.bytes;
    out->time_s = s.time_s();
    out->wait_s = s.wait_s;
    out->reduce_s = s.reduce_s;
    out->transfer_s = s.transfer_s;
    out->steps = static_cast<uint32_t>(s.steps.size());
    out->messages_sent = s.messages_sent;
    out->messages_received = s.messages_received;
    out->skips = s.skips;
    out->late_pieces = s.late_pieces;
    out->direct_segments = s.direct_segments;
    out->late_excluded = s.late_excluded;
    out->slowest_neighbour = s.slowest_neighbour;
    out->skip_threshold_s = s.skip_threshold_s;
    double rs_end = 0;
    for (const StepRecord& r : s.steps) {
      if (r.phase == Phase::kReduceScatter && r.t_end > rs_end) rs_end = r.t_end;
    }
    out->rs_time_s = rs_end > s.start ? rs_end - s.start : 0;
    if (s.algo >= 0) {
      std::snprintf(out->algo, sizeof(out->algo), "%s", algo_name(static_cast<Algo>(s.algo)));
    }
    return MPI_SUCCESS;
  });
}

int skipring_get_totals(skipring_totals_t* totals) {
  return guarded([&]() -> int {
    if (totals == nullptr) return MPI_ERR_ARG;
    const GlobalState& g = state();  // allocates on the very first call
    const auto [fast_calls, fast_bytes] = live_fast_totals();
    totals->calls = g.calls.load(std::memory_order_relaxed) + fast_calls;
    totals->fallbacks = g.fallbacks.load(std::memory_order_relaxed);
    totals->skips = g.skips.load(std::memory_order_relaxed);
    totals->late = g.late.load(std::memory_order_relaxed);
    totals->bytes = g.bytes.load(std::memory_order_relaxed) + fast_bytes;
    totals->time_s = static_cast<double>(g.time_ns.load(std::memory_order_relaxed)) * 1e-9;
    return MPI_SUCCESS;
  });
}

void skipring_count_fallback(void) {
  (void)guarded([]() -> int {
    count_fallback(SKIPRING_FALLBACK_OTHER, nullptr);
    return MPI_SUCCESS;
  });
}

void skipring_count_fallback_reason(int reason) {
  (void)guarded([&]() -> int {
    count_fallback(reason, "MPI_Allreduce");
    return MPI_SUCCESS;
  });
}

int skipring_get_counter(const char* name, uint64_t* value) {
  return guarded([&]() -> int {
    if (name == nullptr || value == nullptr) return MPI_ERR_ARG;
    const GlobalState& g = state();
    const std::string n = name;
    if (n == "mpi") {
      *value = g.mpi_calls.load(std::memory_order_relaxed) + live_fast_totals().first;
      return MPI_SUCCESS;
    }
    for (int r = 0; r < SKIPRING_FALLBACK_REASONS; ++r) {
      if (n == kFallbackNames[r]) {
        *value = g.fallback_by[r].load(std::memory_order_relaxed);
        return MPI_SUCCESS;
      }
    }
    return MPI_ERR_ARG;
  });
}

int skipring_pending_messages(MPI_Comm comm, int* pending) {
  return guarded([&]() -> int {
    if (pending == nullptr) return MPI_ERR_ARG;
    *pending = 0;
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    if (int rc = ensure_init("skipring_pending_messages"); rc != MPI_SUCCESS) return rc;
    Communicator* c = nullptr;
    if (int rc = comm_state(comm, false, &c); rc != MPI_SUCCESS) return rc;
    if (c == nullptr) return MPI_SUCCESS;
    bool waiting = false;
    if (!ok(c->unmatched_message_waiting(&waiting))) return MPI_ERR_OTHER;
    *pending = waiting ? 1 : 0;
    return MPI_SUCCESS;
  });
}

int skipring_set_inject(const char* spec) {
  return guarded([&]() -> int {
    if (int rc = ensure_init("skipring_set_inject"); rc != MPI_SUCCESS) return rc;
    InjectPlan plan;
    std::string error;
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (!ok(InjectPlan::parse(spec == nullptr ? "" : spec, &plan, &error)) ||
        !ok(plan.check_ranks(world_size, &error))) {
      SKIPRING_LOG_ERROR("skipring_set_inject: {} (the plan in force is kept)", error);
      return MPI_ERR_ARG;
    }
    std::lock_guard<std::mutex> lock(state().mutex);
    state().inject = plan;
    for (auto& [c, comm] : state().comms) c->set_inject(plan);
    return MPI_SUCCESS;
  });
}

int skipring_set_skip(int enabled) {
  return guarded([&]() -> int {
    if (int rc = ensure_init("skipring_set_skip"); rc != MPI_SUCCESS) return rc;
    std::lock_guard<std::mutex> lock(state().mutex);
    Config cfg = global_config();
    cfg.skip = enabled != 0;
    set_global_config(cfg);
    for (auto& [c, comm] : state().comms) c->set_skip(enabled != 0);
    return MPI_SUCCESS;
  });
}

int skipring_set_algo(const char* name) {
  return guarded([&]() -> int {
    if (int rc = ensure_init("skipring_set_algo"); rc != MPI_SUCCESS) return rc;
    Algo algo = Algo::kAuto;
    if (name == nullptr) {
      Config env_cfg;
      std::string error;
      if (!ok(load_config(process_env(), &env_cfg, &error))) return MPI_ERR_ARG;
      algo = env_cfg.algo;
    } else if (!parse_algo(name, &algo)) {
      SKIPRING_LOG_ERROR("skipring_set_algo: unknown algorithm '{}'", name);
      return MPI_ERR_ARG;
    }
    std::lock_guard<std::mutex> lock(state().mutex);
    Config cfg = global_config();
    cfg.algo = algo;
    set_global_config(cfg);
    for (auto& [c, comm] : state().comms) c->set_algo(algo);
    return MPI_SUCCESS;
  });
}

int skipring_finalize(void) {
  return guarded([]() -> int {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin || !state().initialised || state().keyval == MPI_KEYVAL_INVALID) return MPI_SUCCESS;
    nb_worker().stop();
    log_fallbacks();
    close_outputs();
    free_all_states();
    return MPI_SUCCESS;
  });
}

const char* skipring_error_string(int code) {
  thread_local char buf[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) {
    std::snprintf(buf, sizeof(buf), "unknown error %d", code);
  }
  return buf;
}

}  // extern "C"
