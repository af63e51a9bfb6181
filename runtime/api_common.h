// What the parts of the C API share (runtime/api_*.cpp; the file map is in
// docs/architecture.md): the process state and the per-communicator lookup (api_state.cpp),
// error codes (api_errors.cpp), argument checks and handle classification (api_args.cpp), the
// totals (api_counters.cpp) and the nonblocking worker's drain (api_nonblocking.cpp). Nothing
// here is exported: libskipring exports the C API only (tests/check_exports.sh).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "runtime/api_front.h"
#include "runtime/communicator.h"
#include "runtime/front_flags.h"
#include "runtime/include/skipring/skipring.h"
#include "runtime/mpi_types.h"
#include "straggler/injection.h"
#include "straggler/msglog.h"
#include "straggler/trace.h"

namespace skipring::api {

// --- The process state, init and finalize (api_state.cpp) ---------------------------------
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
};
GlobalState& state();

// Set once init succeeded: the per-call fast path skips the lock. Cleared again when
// MPI_Finalize starts (on_self_delete), so later calls take the slow path and fail there.
extern std::atomic<bool> g_ready;
// g_front.finalized (runtime/front_flags.h): set when MPI_Finalize deletes MPI_COMM_SELF's
// attributes; from then on no MPI call is made.

// Loads the configuration on the first call; MPI_ERR_OTHER (and a message naming `fn`) when
// MPI is not active, the init error on a bad SKIPRING_* value.
int ensure_init_slow(const char* fn);
inline int ensure_init(const char* fn) {
  if (g_ready.load(std::memory_order_acquire)) return MPI_SUCCESS;
  return ensure_init_slow(fn);
}
// g_front.comm_generation (runtime/front_flags.h) is bumped whenever a communicator's state is
// deleted: per-thread caches of (MPI_Comm -> state) compare it (a freed MPI_Comm handle can be
// reused).
// Finds or creates the state for `comm` (collective on first use).
// drain: first wait for the communicator's pending nonblocking calls (every entry point but
// skipring_iallreduce, which queues behind them).
int comm_state(MPI_Comm comm, bool create, Communicator** out, bool drain = true);
// Frees every communicator's state (finalize).
void free_all_states();
// SKIPRING_TRACE's and SKIPRING_MSGLOG's files, at finalize.
void close_outputs();

// --- Errors (api_errors.cpp) ---------------------------------------------------------------
int to_mpi_error(Status s);
// Logs why a call's arguments are rejected and returns `code`. The codes are those of Open
// MPI's own argument checks for the same call (skipring.h lists them).
int reject(const char* fn, int code, const char* why);

// Runs an entry point's body (returning an MPI error code) so that nothing thrown crosses the
// C ABI: std::bad_alloc becomes MPI_ERR_NO_MEM, any other exception MPI_ERR_OTHER. Every
// extern "C" function and describe_selection go through it.
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

// --- Arguments and handles (api_args.cpp) --------------------------------------------------
// aliased() and overlapping(): runtime/api_front.h.
inline constexpr const char* kOverlapWhy =
    "sendbuf and recvbuf overlap (aliasing is erroneous in MPI; pass MPI_IN_PLACE as sendbuf "
    "for an in-place call)";
inline constexpr const char* kAliasWhy =
    "sendbuf and recvbuf are the same buffer (aliasing is erroneous in MPI; pass MPI_IN_PLACE "
    "as sendbuf for an in-place call)";
// The buffer checks skipring_allreduce and skipring_iallreduce share (MPI_SUCCESS: none failed).
int check_allreduce_buffers(const char* fn, const void* sendbuf, const void* recvbuf, int count,
                            MpiReduction kind, DType dt);
// The argument checks skipring_allreduce and skipring_iallreduce share, in MPI's order: the
// communicator, the count, skipring's initialization, the communicator's state (found, not
// created; `drain` as comm_state's), the (datatype, op) pair and the buffers. MPI_SUCCESS: none
// failed, and *out holds what they found.
struct AllreduceArgs {
  DType dt = DType::kInt8;  // set by reduction_of for native pairs
  ROp rop = ROp::kSum;
  Communicator* c = nullptr;  // the communicator's state, when it has one already
  MpiReduction kind = MpiReduction::kUndefined;
};
int check_allreduce_args(const char* fn, const void* sendbuf, const void* recvbuf, int count,
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, bool drain,
                         AllreduceArgs* out);
// The (datatype, op) pair as skipring sees it (classify_reduction); kOther while disabled.
MpiReduction reduction_of(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop);
// Why a reduction goes to PMPI: disabled, the datatype, or the op (classify_reduction said
// kOther).
int reduction_fallback_reason(MPI_Datatype datatype);
bool intra_comm(MPI_Comm comm);
// True when skipring runs collectives on `comm` itself: it has skipring state already (checked
// when the state was created) or is an intra-communicator.
bool native_comm(MPI_Comm comm);
bool handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, DType* dt, ROp* rop);
// The collectives without a reduction (allgather, bcast): the type alone decides.
bool handles_type(MPI_Datatype datatype, MPI_Comm comm, DType* dt);
// Why a collective without a reduction goes to PMPI (handles_type or the memory said no);
// `same`: the send and receive types and counts match.
int type_fallback_reason(bool same, MPI_Datatype datatype, bool memory);
int root_error(int root, MPI_Comm comm);
// skipring's 16-bit float types are pairs of bytes to MPI: PMPI cannot reduce them with a
// predefined op, so a reduction that would fall back fails here, saying why (MPI_ERR_TYPE), and
// MPI_SUCCESS means the fallback may go ahead.
int extension_fallback_error(const char* fn, MPI_Datatype datatype, MPI_Op op);

// --- Totals and counters (api_counters.cpp) ------------------------------------------------
// Adds a finished collective to the totals and the trace.
void account(const CollectiveStats& s);
inline void account(Communicator* c) { account(c->last_stats()); }
// Counts one fallback of `fn` with its reason; the first of each reason is said at info level,
// naming the datatype and op where the caller passes them, and at debug level the first of each
// (function, reason, datatype, op), so that a user sees which types and ops of a program go to
// the MPI library (kFallbackKindsLogged of them, then one line saying more are not logged).
void count_fallback(int reason, const char* fn, MPI_Datatype datatype = MPI_DATATYPE_NULL,
                    MPI_Op op = MPI_OP_NULL);
// A communicator's state is deleted: its fast-path calls stay in the process totals.
void absorb_fast_totals(const Communicator* c);
// At finalize, at info level: what went to the MPI library and why.
void log_fallbacks();

// --- The nonblocking all-reduce's worker (api_nonblocking.cpp) -----------------------------
// Jobs submitted and not yet finished, all communicators (the per-call check is one load).
// Returns once no nonblocking call of `c` is queued or running.
void wait_nonblocking(Communicator* c);
// Sleeps until none of `requests` is a nonblocking all-reduce still running on the progress
// thread (skipring_block_on_requests).
void block_on_requests(int count, const MPI_Request* requests);
// Waits for c's pending nonblocking calls (none: one load).
inline void drain_nonblocking(Communicator* c) {
  if (c != nullptr && g_front.nb_pending.load(std::memory_order_acquire) != 0) wait_nonblocking(c);
}
// Runs what is queued, then ends the worker thread (finalize).
void stop_nonblocking();

}  // namespace skipring::api
