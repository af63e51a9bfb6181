// Watched waits on MPI requests (see mpi_wait.h).
#include "runtime/mpi_wait.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "runtime/log.h"

namespace skipring {

WaitPolicy wait_policy(const Config& cfg, const Clock* clock) {
  WaitPolicy p;
  p.clock = clock;
  p.timeout_s = cfg.timeout_s;
  p.abort_on_timeout = cfg.abort_on_timeout;
  p.spins = cfg.poll_spins;
  p.idle_sleep_us = cfg.idle_sleep_us;
  return p;
}

std::string WaitWhat::describe() const {
  std::string out = what;
  if (seq >= 0) out += fmt::format(" #{}", seq);
  if (how != nullptr) out += fmt::format(" ({})", how);
  if (step >= 0) out += fmt::format(", round {}", step);
  if (peer >= 0) {
    out += fmt::format(": rank {} has not answered", peer);
  } else {
    out +=
        ": some rank has not joined (stopped, busy elsewhere, skipping this call, or started "
        "with different SKIPRING_ENABLE / SKIPRING_ALGO)";
  }
  return out;
}

void abort_job_after_log() {
  SKIPRING_LOG_ERROR("watchdog: SKIPRING_ON_TIMEOUT=abort: calling MPI_Abort");
  logger().flush();
  std::this_thread::sleep_for(std::chrono::duration<double>(kAbortLogGraceS));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; if an implementation does, end the process anyway
}

namespace {

// MPI_Test for one request (cheaper than MPI_Testall: the direct recursive doubling's waits on
// a receive alone are on the 8-byte latency path), MPI_Testall otherwise.
inline int test_all(const Requests& r, int* done) {
  return r.n == 1 ? MPI_Test(r.reqs, done, r.statuses ? r.statuses : MPI_STATUS_IGNORE)
                  : MPI_Testall(r.n, r.reqs, done, r.statuses ? r.statuses : MPI_STATUSES_IGNORE);
}

#ifndef SKIPRING_SIMGRID
// The timeout: everything pending is let go as far as MPI allows.
Status give_up(Requests r, const WaitPolicy& policy, const WaitWhat& what, double idle,
               std::string* message) {
  const std::string text = fmt::format("no progress for {:.1f} s (SKIPRING_TIMEOUT={} s): {}", idle,
                                       policy.timeout_s, what.describe());
  SKIPRING_LOG_ERROR("watchdog: {}", text);
  if (policy.abort_on_timeout) abort_job_after_log();
  if (r.recvs >= 0) {
    for (int i = 0; i < r.n; ++i) {
      if (r.reqs[i] == MPI_REQUEST_NULL) continue;
      if (i < r.recvs) {
        MPI_Cancel(&r.reqs[i]);
        MPI_Wait(&r.reqs[i], MPI_STATUS_IGNORE);  // a cancelled receive completes locally
      } else {
        MPI_Request_free(&r.reqs[i]);
      }
    }
  }
  if (message != nullptr) *message = text;
  return Status::kErrTimeout;
}

#endif  // SKIPRING_SIMGRID

}  // namespace

Status wait_all(Requests r, const WaitPolicy& policy, const WaitWhat& what, std::string* message) {
#ifdef SKIPRING_SIMGRID
  (void)policy;
  (void)what;
  (void)message;
  return MPI_Waitall(r.n, r.reqs, r.statuses ? r.statuses : MPI_STATUSES_IGNORE) == MPI_SUCCESS
             ? Status::kOk
             : Status::kErrTransport;
#else
  if (policy.timeout_s <= 0) {
    // No watchdog (SKIPRING_TIMEOUT=0): MPI's own blocking wait.
    return (r.n == 1 ? MPI_Wait(r.reqs, r.statuses ? r.statuses : MPI_STATUS_IGNORE)
                     : MPI_Waitall(r.n, r.reqs, r.statuses ? r.statuses : MPI_STATUSES_IGNORE)) ==
                   MPI_SUCCESS
               ? Status::kOk
               : Status::kErrTransport;
  }
  int done = 0;
  for (int i = 0; i <= policy.spins; ++i) {
    if (test_all(r, &done) != MPI_SUCCESS) return Status::kErrTransport;
    if (done) return Status::kOk;
  }
  // Idle: from here the clock is read at every test.
  constexpr double kSleepAfter = 1e-3;
  const bool watched = policy.timeout_s > 0 && policy.clock != nullptr;
  const double since = policy.clock != nullptr ? policy.clock->now() : 0;
  double next_warn = watched ? watchdog_first_warn_s(policy.timeout_s) : 0;
  int sleep_us = 1;
  for (;;) {
    if (test_all(r, &done) != MPI_SUCCESS) return Status::kErrTransport;
    if (done) return Status::kOk;
    const double idle = policy.clock != nullptr ? policy.clock->now() - since : 0;
    if (watched && idle >= next_warn) {
      if (idle >= policy.timeout_s) return give_up(r, policy, what, idle, message);
      SKIPRING_LOG_WARN("watchdog: no progress for {:.1f} s (fails at SKIPRING_TIMEOUT={} s): {}",
                        idle, policy.timeout_s, what.describe());
      while (next_warn <= idle) next_warn += watchdog_warn_every_s(policy.timeout_s);
      next_warn = std::min(next_warn, policy.timeout_s);
    }
    if (policy.idle_sleep_us == 0 || policy.clock == nullptr || idle < kSleepAfter) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, policy.idle_sleep_us);
  }
#endif
}

Status send_watched(const void* buf, size_t bytes, int peer, int tag, MPI_Comm comm,
                    const WaitPolicy& policy, const WaitWhat& what, std::string* message) {
  MPI_Request req;
  if (MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &req) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  return wait_all(Requests{&req, 1, 0}, policy, what, message);
}

Status recv_watched(void* buf, size_t bytes, int peer, int tag, MPI_Comm comm,
                    const WaitPolicy& policy, const WaitWhat& what, std::string* message) {
  MPI_Request req;
  if (MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &req) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  return wait_all(Requests{&req, 1, 1}, policy, what, message);
}

}  // namespace skipring
