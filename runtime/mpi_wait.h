// Waiting on MPI requests outside the progress engine, under the same watchdog.
//
// The engine (progress_engine.h) watches the collectives it runs. Everything else that waits
// on another rank goes through wait_all: the direct recursive doubling (rd_direct.h), the
// communicator's setup (agreement all-reduce, topology gather, cost probe), SKIPRING_CHECK's
// per-call agreement. A rank that never arrives (stopped, crashed without killing the job,
// skipping a call, started with a different SKIPRING_ENABLE) then gives warnings and an error,
// never a silent hang.
//
// How it waits: MPI_Testall, `spins` times without reading the clock (a small message's round
// trip on shared memory is a few hundred ns: the clock stays off the fast path), then
// sched_yield between tests (ranks are often oversubscribed: the rank waited for may need this
// core), and after 1 ms idle short sleeps growing to idle_sleep_us. Under SimGrid, MPI_Waitall
// (simulated time only advances inside MPI; SimGrid reports deadlocks itself).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "runtime/config.h"

namespace skipring {

// The watchdog's schedule, shared with the progress engine: the first warning after half the
// timeout (at most 30 s), then every tenth of it (at most 10 s).
inline double watchdog_first_warn_s(double timeout_s) { return std::min(30.0, timeout_s / 2); }
inline double watchdog_warn_every_s(double timeout_s) { return std::min(10.0, timeout_s / 10); }

struct WaitPolicy {
  const Clock* clock = nullptr;
  double timeout_s = 300;         // SKIPRING_TIMEOUT; 0 = never
  bool abort_on_timeout = false;  // SKIPRING_ON_TIMEOUT=abort
  int spins = 200;                // SKIPRING_POLL_SPINS
  int idle_sleep_us = 20;         // SKIPRING_IDLE_SLEEP_US
};

WaitPolicy wait_policy(const Config& cfg, const Clock* clock);

// What a wait is for, formatted only when a warning or the error is written:
// "<what> #<seq> (<how>), round <step>: rank <peer> has not answered" (the parts given).
struct WaitWhat {
  const char* what = "";
  const char* how = nullptr;  // e.g. the algorithm
  int64_t seq = -1;           // the collective's sequence number on its communicator
  int step = -1;              // round or step inside it
  int peer = -1;              // the rank waited for; -1: a collective of every rank
  std::string describe() const;
};

// The requests: `recvs` leading point-to-point receives, then point-to-point sends; recvs < 0:
// non-blocking collectives (which MPI lets nobody cancel or free).
struct Requests {
  MPI_Request* reqs;
  int n;
  int recvs;
  MPI_Status* statuses = nullptr;  // n statuses, filled at completion; nullptr: ignored
};

// Completes every request. At the timeout: logs the error (and calls MPI_Abort when asked),
// cancels and completes the pending receives (nothing lands in the caller's buffers later),
// frees the pending sends (they finish in the background), leaves pending collectives, stores
// the message in *message when given and returns kErrTimeout. An MPI error: kErrTransport.
Status wait_all(Requests r, const WaitPolicy& policy, const WaitWhat& what,
                std::string* message = nullptr);

// SKIPRING_ON_TIMEOUT=abort: logs that it calls MPI_Abort, flushes the log, gives the launcher
// kAbortLogGraceS to forward it (MPICH's Hydra tears the job down at the first MPI_Abort and
// dropped the tail of the aborting rank's stderr, the watchdog's state dump and this line, once
// in 28 runs of mpi_watchdog_abort_np3, during a fresh-clone CI run), then calls
// MPI_Abort(MPI_COMM_WORLD, 1). Does not return.
constexpr double kAbortLogGraceS = 0.2;
[[noreturn]] void abort_job_after_log();

// One point-to-point message of `bytes` bytes to or from `peer`, posted and waited for.
Status send_watched(const void* buf, size_t bytes, int peer, int tag, MPI_Comm comm,
                    const WaitPolicy& policy, const WaitWhat& what, std::string* message = nullptr);
Status recv_watched(void* buf, size_t bytes, int peer, int tag, MPI_Comm comm,
                    const WaitPolicy& policy, const WaitWhat& what, std::string* message = nullptr);

// The buffers of a collective left pending at a timeout must never be freed (MPI may still
// complete it and write them): they are leaked (a move keeps a vector's storage). Rare: a
// timeout breaks the communicator. Such buffers are vectors, never locals on the stack.
template <typename T>
void leak_pending(std::vector<T>* v) {
  new std::vector<T>(std::move(*v));  // NOLINT: intentionally never freed
}

// Completes `n` non-blocking collectives whose start returned `started` (MPI_SUCCESS or an
// error: then kErrTransport), watched; at a timeout the vectors `pending` (their buffers) are
// leaked, since MPI lets nobody cancel a collective.
template <typename... V>
Status wait_collectives(int started, MPI_Request* reqs, int n, const WaitPolicy& policy,
                        const WaitWhat& what, std::string* message, V*... pending) {
  if (started != MPI_SUCCESS) return Status::kErrTransport;
  const Status st = wait_all(Requests{reqs, n, -1}, policy, what, message);
  if (st == Status::kErrTimeout) (leak_pending(pending), ...);
  return st;
}

}  // namespace skipring
