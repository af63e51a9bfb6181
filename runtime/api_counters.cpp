// The C API's totals and counters: the process-wide totals every collective adds to (and the
// trace), fallbacks by reason, the report at finalize, and the calls that read them
// (skipring_last_stats, skipring_get_totals, skipring_get_counter, ...).
#include <mpi.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/api_common.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

// The names of the fallback reasons (skipring_get_counter, the report line, the info log).
constexpr const char* kFallbackNames[SKIPRING_FALLBACK_REASONS] = {
    "fallback_datatype", "fallback_op",    "fallback_comm",  "fallback_memory",
    "fallback_disabled", "fallback_other", "fallback_thread"};
constexpr const char* kFallbackWhy[SKIPRING_FALLBACK_REASONS] = {
    "a datatype skipring does not reduce (derived, ...)",
    "an op skipring does not run (user-defined, REPLACE, ...)",
    "an inter-communicator",
    "device buffers without a device path",
    "SKIPRING_ENABLE=0",
    "the caller's own count",
    "a nonblocking call without MPI_THREAD_MULTIPLE (the progress thread needs it)"};

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

}  // namespace

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

void absorb_fast_totals(const Communicator* c) {
  const Communicator::FastTotals& f = c->fast_totals();
  const uint64_t calls = f.calls.load(std::memory_order_relaxed);
  state().calls.fetch_add(calls, std::memory_order_relaxed);
  state().mpi_calls.fetch_add(calls, std::memory_order_relaxed);
  state().bytes.fetch_add(f.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

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

}  // namespace skipring::api

using namespace skipring;
using namespace skipring::api;

extern "C" {

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

}  // extern "C"
