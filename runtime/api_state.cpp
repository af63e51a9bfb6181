// The C API's process state: init (the configuration, injection, trace and message log),
// finalize (MPI_COMM_SELF's attribute and skipring_finalize), the per-communicator state cached
// as an MPI attribute, and the calls that change the configuration at run time.
#include <mpi.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/api_common.h"
#include "runtime/api_device.h"
#include "runtime/api_internal.h"
#include "runtime/config.h"
#include "runtime/log.h"

namespace skipring {
FrontFlags g_front;
}  // namespace skipring

namespace skipring::api {

std::atomic<bool> g_ready{false};

GlobalState& state() {
  static GlobalState* s = new GlobalState();  // never destroyed: used from MPI_Finalize hooks
  return *s;
}

// Any state deletion bumps the generation, which invalidates every thread's cached entries (a
// freed MPI_Comm handle can be reused).

namespace {

// The last communicator this thread used and its state: an attribute lookup costs tens of
// nanoseconds, a noticeable part of a small all-reduce.
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
  g_front.comm_generation.fetch_add(1, std::memory_order_acq_rel);
  auto* c = static_cast<Communicator*>(attr);
  drain_nonblocking(c);  // MPI lets a communicator with pending operations be freed
  absorb_fast_totals(c);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().comms.erase(c);
  }
  release_staging(c);
  delete c;
  return MPI_SUCCESS;
}

int on_self_delete(MPI_Comm, int, void*, void*) {
  stop_nonblocking();
  log_fallbacks();
  g_front.finalized.store(true, std::memory_order_release);
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
  } else if (mpi_fin || g_front.finalized.load(std::memory_order_acquire)) {
    when = "after MPI_Finalize";
  } else {
    return MPI_SUCCESS;
  }
  SKIPRING_LOG_ERROR("{} called {}: returns MPI_ERR_OTHER (MPI is not active)", fn, when);
  return MPI_ERR_OTHER;
}

}  // namespace

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

int ensure_init_slow(const char* fn) {
  if (int rc = mpi_inactive_error(fn); rc != MPI_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(state().mutex);
  return init_locked();
}

int comm_state(MPI_Comm comm, bool create, Communicator** out, bool drain) {
  CommCache& cache = t_comm_cache;
  const uint64_t generation = g_front.comm_generation.load(std::memory_order_acquire);
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

}  // namespace skipring::api

namespace skipring {

using namespace api;

int describe_selection(MPI_Comm comm, size_t max_bytes, std::string* out) {
  return api::guarded([&]() -> int {
    if (int rc = ensure_init("describe_selection"); rc != MPI_SUCCESS) return rc;
    Communicator* c = nullptr;
    if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
    *out = c->describe_selection(max_bytes);
    return MPI_SUCCESS;
  });
}

}  // namespace skipring

using namespace skipring;
using namespace skipring::api;

extern "C" {

int skipring_init(void) {
  return guarded([]() -> int { return ensure_init("skipring_init"); });
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
    stop_nonblocking();
    log_fallbacks();
    close_outputs();
    free_all_states();
    return MPI_SUCCESS;
  });
}

}  // extern "C"
