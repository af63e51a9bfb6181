// The C API's totals and counters: the process-wide totals every collective adds to (and the
// trace), fallbacks by reason, the report at finalize, and the calls that read them
// (skipring_last_stats, skipring_get_totals, skipring_get_counter, ...).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

// The kinds of fallback the debug log names (count_fallback).
constexpr size_t kFallbackKindsLogged = 64;
// A kind is what the log says of it: user-defined ops and unnamed derived datatypes are one
// kind each however many handles a program creates (a DFT code created an op per call).
struct FallbackKind {
  std::string fn;
  int reason;
  std::string what;
  bool operator==(const FallbackKind& o) const {
    return reason == o.reason && fn == o.fn && what == o.what;
  }
};

const char* op_name(MPI_Op op) {
  if (op == MPI_SUM) return "MPI_SUM";
  if (op == MPI_PROD) return "MPI_PROD";
  if (op == MPI_MIN) return "MPI_MIN";
  if (op == MPI_MAX) return "MPI_MAX";
  if (op == MPI_LAND) return "MPI_LAND";
  if (op == MPI_LOR) return "MPI_LOR";
  if (op == MPI_LXOR) return "MPI_LXOR";
  if (op == MPI_BAND) return "MPI_BAND";
  if (op == MPI_BOR) return "MPI_BOR";
  if (op == MPI_BXOR) return "MPI_BXOR";
  if (op == MPI_MINLOC) return "MPI_MINLOC";
  if (op == MPI_MAXLOC) return "MPI_MAXLOC";
  if (op == MPI_REPLACE) return "MPI_REPLACE";
  if (op == MPI_NO_OP) return "MPI_NO_OP";
  return "a user-defined op";
}

// ": datatype NAME, op NAME" for the log ("" when neither is known). A datatype without a name
// (derived) is described by its combiner's number (MPI_Type_get_envelope).
std::string what_of(MPI_Datatype datatype, MPI_Op op) {
  std::string out;
  if (datatype != MPI_DATATYPE_NULL) {
    char name[MPI_MAX_OBJECT_NAME] = {0};
    int len = 0;
    if (PMPI_Type_get_name(datatype, name, &len) == MPI_SUCCESS && len > 0) {
      out = std::string(": datatype ") + std::string(name, static_cast<size_t>(len));
    } else {
      int ni = 0, na = 0, nd = 0, combiner = 0;
      PMPI_Type_get_envelope(datatype, &ni, &na, &nd, &combiner);
      out = ": a derived datatype without a name (combiner " + std::to_string(combiner) + ")";
    }
  }
  if (op != MPI_OP_NULL) out += std::string(out.empty() ? ": op " : ", op ") + op_name(op);
  return out;
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

void count_fallback(int reason, const char* fn, MPI_Datatype datatype, MPI_Op op) {
  if (reason < 0 || reason >= SKIPRING_FALLBACK_REASONS) reason = SKIPRING_FALLBACK_OTHER;
  GlobalState& g = state();
  g.fallbacks.fetch_add(1, std::memory_order_relaxed);
  const bool first = g.fallback_by[reason].fetch_add(1, std::memory_order_relaxed) == 0;
  if (fn == nullptr) return;
  if (first) {
    SKIPRING_LOG_INFO(
        "{}: handed to the MPI library: {}{} (the first such call; later ones are counted in "
        "{} of the report line)",
        fn, kFallbackWhy[reason], what_of(datatype, op), kFallbackNames[reason]);
  }
  if (!logger().should_log(spdlog::level::debug)) return;
  // Debug: the first call of each (function, reason, datatype, op).
  static std::mutex mutex;
  static std::vector<FallbackKind> seen;
  std::lock_guard<std::mutex> lock(mutex);
  const FallbackKind k{fn, reason, what_of(datatype, op)};
  for (const FallbackKind& s : seen) {
    if (s == k) return;
  }
  if (seen.size() > kFallbackKindsLogged) return;
  seen.push_back(k);
  if (seen.size() > kFallbackKindsLogged) {
    SKIPRING_LOG_DEBUG("more kinds of fallback than {}: the others are not logged",
                       kFallbackKindsLogged);
    return;
  }
  if (first) return;  // said at info level just now
  SKIPRING_LOG_DEBUG("{}: handed to the MPI library: {}{} (the first call of this kind)", fn,
                     kFallbackWhy[reason], k.what);
}

void absorb_fast_totals(const Communicator* c) {
  const FrontLine::Totals& f = c->fast_totals();
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
