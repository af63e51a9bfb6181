// Progress engine implementation.
#include "runtime/progress_engine.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "collectives/reduce_kernels.h"
#include "runtime/config.h"
#include "runtime/log.h"
#include "runtime/mpi_wait.h"

#ifdef SKIPRING_SIMGRID
#include <smpi/smpi.h>  // smpi_execute_benched
#include <time.h>

#include "sim/smpi_wait.h"
#endif

namespace skipring {

ProgressEngine::ProgressEngine(Transport* transport, const Clock* clock, EngineOptions options)
    : transport_(transport),
      clock_(clock),
      options_(options),
      watch_from_(options.timeout_s > 0 ? watchdog_first_warn_s(options.timeout_s)
                                        : std::numeric_limits<double>::infinity()) {
  static std::atomic<int> engines{0};
  engine_id_ = engines.fetch_add(1, std::memory_order_relaxed);
}

void ProgressEngine::log_posted(const Action& a) {
  posted_[a.token] = Posted{clock_->now(), a.peer, a.tag, a.payload_bytes};
}

void ProgressEngine::log_completed(const Completion& c, double now) {
  const auto it = posted_.find(c.token);
  if (it == posted_.end()) return;
  const Posted& p = it->second;
  log_->message(c.is_recv, p.t, now, engine_id_, c.is_recv && c.peer >= 0 ? c.peer : p.peer, p.tag,
                c.is_recv ? c.payload_bytes : p.bytes);
  posted_.erase(it);
}

EngineOptions engine_options(const Config& cfg) {
  EngineOptions o;
  o.poll_spins = cfg.poll_spins;
  o.idle_sleep_us = cfg.idle_sleep_us;
  o.sim_reduce_gbps = cfg.sim_reduce_gbps;
  o.sim_poll_s = cfg.sim_poll_ns * 1e-9;
  o.sim_block = cfg.sim_block;
  o.timeout_s = cfg.timeout_s;
  o.abort_on_timeout = cfg.abort_on_timeout;
  return o;
}

#ifdef SKIPRING_SIMGRID
void ProgressEngine::sim_charge_reduce(const Action& a) {
  // The host's real kernel time does not count (run with smpi/simulate-computation:no); the
  // modelled time does, as an execution on this rank's simulated host (its speed from the
  // platform, so smpi/host-speed does not matter).
  const double bytes = static_cast<double>(a.count) * static_cast<double>(dtype_size(a.dtype));
  if (bytes > 0) smpi_execute_benched(bytes / (options_.sim_reduce_gbps * 1e9));
}

Status ProgressEngine::sim_step(bool* progressed) {
  *progressed = false;
  if (options_.sim_block && smpi_wait::arm(next_wakeup())) {
    // The poll waits until one operation completes (MPI_Waitany: one wake-up per event) or
    // the next timer is due; it does not wait when something is complete already.
    SKIPRING_RETURN_IF_ERROR(progress(progressed));
    if (smpi_wait::take_consumed() || *progressed) return Status::kOk;
    if (transport_->outstanding() == 0) {
      // Nothing posted to wait on: only the next timer can change anything.
      if (next_wakeup() == std::numeric_limits<double>::infinity()) {
        SKIPRING_LOG_ERROR("progress engine: idle with nothing posted and no timer: {}",
                           core_->describe());
        return Status::kErrInternal;
      }
      sim_sleep(next_wakeup() - clock_->now());
      return Status::kOk;
    }
    sim_warn_polling("the transport's poll did not reach the MPI_Testsome redirect");
  } else {
    SKIPRING_RETURN_IF_ERROR(progress(progressed));
    if (*progressed) return Status::kOk;
    if (options_.sim_block) sim_warn_polling(smpi_wait::unavailable_reason());
  }
  // Polling: never sleep past the next timer (a skip deadline, the end of an injected delay).
  sim_sleep(std::min(options_.sim_poll_s, next_wakeup() - clock_->now()));
  return Status::kOk;
}

void ProgressEngine::sim_warn_polling(const char* why) {
  static bool warned = false;  // per rank (SMPI privatises it); rank 0 speaks for all
  if (warned || transport_->rank() != 0) return;
  warned = true;
  SKIPRING_LOG_WARN(
      "SimGrid: cannot block until the next event ({}): polling every {} ns of "
      "simulated time instead",
      why, options_.sim_poll_s * 1e9);
}

void ProgressEngine::sim_sleep(double s) {
  // Always sleep a little: a zero-length sleep would let simulated time stand still.
  s = std::max(s, 1e-9);
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>(std::ceil((s - static_cast<double>(ts.tv_sec)) * 1e9));
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  smpi_nanosleep(&ts, nullptr);
}
#endif

Status ProgressEngine::begin(CollectiveCore* core) {
  core_ = core;
  finished_ = false;
  actions_.clear();
  held_.clear();
  delayed_steps_.clear();
  last_release_ = 0;
  recv_tokens_.clear();
  last_event_ = clock_->now();
  log_ = message_log();
  posted_.clear();
  if (log_ != nullptr) log_->collective(true, last_event_, engine_id_);
  SKIPRING_RETURN_IF_ERROR(core_->start(last_event_, &actions_));
  return execute(&actions_);
}

Status ProgressEngine::execute(ActionList* actions) {
  // Reductions complete synchronously here and may append further actions, so walk by index.
  for (size_t i = 0; i < actions->size(); ++i) {
    const Action a = (*actions)[i];
    switch (a.kind) {
      case Action::Kind::kSend: {
        // Injected straggler: the step's first send (and every later one of the step, to keep
        // order) waits until the delay has passed.
        double release = 0;
        if (step_delay_ && a.phase >= 0 && a.step >= 0) {
          const size_t key = static_cast<size_t>(a.step) * 2 + static_cast<size_t>(a.phase);
          if (delayed_steps_.size() <= key) delayed_steps_.resize(key + 1, 0);
          if (!delayed_steps_[key]) {
            delayed_steps_[key] = 1;
            const double d = step_delay_(static_cast<Phase>(a.phase), a.step);
            // A slow step delays every later one too: delays run back to back.
            if (d > 0) release = last_release_ = std::max(clock_->now(), last_release_) + d;
          }
        }
        if (release > 0 || !held_.empty()) {
          held_.push_back(Held{std::max(release, held_.empty() ? 0.0 : held_.back().release), a});
        } else {
          SKIPRING_RETURN_IF_ERROR(post(a));
        }
        break;
      }
      case Action::Kind::kCancel:
        // The core cancels only receives that can no longer match; the transport reports an
        // error if one was matched after all.
        SKIPRING_RETURN_IF_ERROR(transport_->cancel(a.token));
        break;
      case Action::Kind::kRecv:
        if (log_ != nullptr) log_posted(a);
        recv_tokens_.push_back(a.token);
        SKIPRING_RETURN_IF_ERROR(transport_->post_recv(a.peer, a.tag, a.header, a.header_bytes,
                                                       a.payload, a.payload_bytes, a.token));
        break;
      case Action::Kind::kReduce:
        SKIPRING_RETURN_IF_ERROR(reduce(a.op, a.dtype, a.dst, a.a, a.b, a.count));
#ifdef SKIPRING_SIMGRID
        sim_charge_reduce(a);
#endif
        SKIPRING_RETURN_IF_ERROR(core_->on_reduce(a.token, clock_->now(), actions));
        break;
      case Action::Kind::kCopy:
        if (a.payload_bytes > 0 && a.dst != a.a) std::memcpy(a.dst, a.a, a.payload_bytes);
        break;
      case Action::Kind::kDone:
        finished_ = true;
        if (log_ != nullptr) log_->collective(false, clock_->now(), engine_id_);
        break;
    }
  }
  actions->clear();
  return Status::kOk;
}

Status ProgressEngine::post(const Action& a) {
  if (log_ != nullptr) log_posted(a);
  return transport_->post_send(a.peer, a.tag, a.header, a.header_bytes, a.payload, a.payload_bytes,
                               a.token);
}

double ProgressEngine::next_wakeup() const {
  double t = core_ != nullptr && !finished_ ? core_->next_deadline()
                                            : std::numeric_limits<double>::infinity();
  if (!held_.empty()) t = std::min(t, held_.front().release);
  return t;
}

Status ProgressEngine::progress(bool* progressed) {
  *progressed = false;
  if (core_ == nullptr || finished_) return Status::kOk;
  if (!held_.empty() && held_.front().release <= clock_->now()) {
    while (!held_.empty() && held_.front().release <= clock_->now()) {
      SKIPRING_RETURN_IF_ERROR(post(held_.front().action));
      held_.pop_front();
    }
    last_event_ = clock_->now();
    *progressed = true;
  }
  completions_.clear();
  SKIPRING_RETURN_IF_ERROR(transport_->poll(&completions_));
  for (const Completion& c : completions_) {
    const double now = clock_->now();
    last_event_ = now;
    if (log_ != nullptr) log_completed(c, now);
    if (c.is_recv) {
      SKIPRING_RETURN_IF_ERROR(core_->on_recv(c.token, c.payload_bytes, now, &actions_));
    } else {
      SKIPRING_RETURN_IF_ERROR(core_->on_send(c.token, now, &actions_));
    }
    SKIPRING_RETURN_IF_ERROR(execute(&actions_));
    *progressed = true;
  }
  // Read the clock only when the core has a timer armed (most collectives have none).
  const double deadline = core_->next_deadline();
  if (deadline != std::numeric_limits<double>::infinity() && deadline <= clock_->now()) {
    const double now = clock_->now();
    SKIPRING_RETURN_IF_ERROR(core_->on_time(now, &actions_));
    SKIPRING_RETURN_IF_ERROR(execute(&actions_));
    *progressed = true;
    // A timer is not progress; a core whose timer fires at every poll never reaches run()'s
    // back-off, so the watchdog looks here too.
    SKIPRING_RETURN_IF_ERROR(check_watchdog(now));
  }
  return Status::kOk;
}

Status ProgressEngine::watchdog(double now) {
  if (core_ == nullptr || finished_) return Status::kOk;
  const double idle = now - last_event_;
  if (watch_base_ != last_event_) {  // a new stretch without progress
    watch_base_ = last_event_;
    next_warn_ = watch_from_;
  }
  if (idle < options_.timeout_s) {
    if (idle >= next_warn_) {
      const double every = watchdog_warn_every_s(options_.timeout_s);
      while (next_warn_ <= idle) next_warn_ += every;
      SKIPRING_LOG_WARN("watchdog: no progress for {:.1f} s (fails at SKIPRING_TIMEOUT={} s): {}",
                        idle, options_.timeout_s, core_->describe_wait(now));
    }
    return Status::kOk;
  }
  std::string what = core_->describe_wait(now);
  if (what.empty()) what = "(the collective does not say what it waits for)";
  timeout_message_ = fmt::format("no progress for {:.1f} s (SKIPRING_TIMEOUT={} s): {}", idle,
                                 options_.timeout_s, what);
  SKIPRING_LOG_ERROR("watchdog: {}", timeout_message_);
  {
    // What the collective still holds open (receives, sends, protocol messages): for a report.
    std::string state = core_->describe();
    if (state.size() > 4000) state = state.substr(0, 4000) + " ...";
    SKIPRING_LOG_ERROR("watchdog: collective state: {}", state);
  }
  if (options_.abort_on_timeout) abort_job_after_log();
  // This rank's receives of the collective are no longer wanted: a late message must not land
  // in the caller's buffers after the error. Tokens of receives that completed or were
  // cancelled already are refused by the transport (ignored here); sends cannot be cancelled.
  std::sort(recv_tokens_.begin(), recv_tokens_.end());
  recv_tokens_.erase(std::unique(recv_tokens_.begin(), recv_tokens_.end()), recv_tokens_.end());
  for (const Token t : recv_tokens_) (void)transport_->cancel(t);
  recv_tokens_.clear();
  held_.clear();
  core_ = nullptr;
  if (log_ != nullptr) log_->collective(false, now, engine_id_, /*failed=*/true);
  return Status::kErrTimeout;
}

Status ProgressEngine::run(CollectiveCore* core) {
  const Status st = run_until_done(core);
  if (!ok(st)) {
    // The collective failed (an error, or the watchdog): its buffers are the caller's again
    // once this returns, and must not be written into any more. A transport whose matched
    // receives can still be written by their senders (UcxTransport's put rendezvous) waits for
    // them here, bounded, and stops (docs/reliability.md). The bound: the watchdog's timeout,
    // 1 to 5 s.
    const double t = options_.timeout_s > 0 ? options_.timeout_s : 5.0;
    transport_->abandon(std::min(5.0, std::max(1.0, t)));
  }
  return st;
}

Status ProgressEngine::run_until_done(CollectiveCore* core) {
  SKIPRING_RETURN_IF_ERROR(begin(core));
#ifdef SKIPRING_SIMGRID
  // Under SMPI: poll, and when nothing happened sleep in simulated time (spinning or
  // sched_yield would let simulated time stand still: the simulation would livelock).
  while (!finished_) {
    bool progressed = false;
    SKIPRING_RETURN_IF_ERROR(sim_step(&progressed));
    if (!progressed) SKIPRING_RETURN_IF_ERROR(check_watchdog(clock_->now()));
  }
  return Status::kOk;
#else
  // Back-off when idle: spin (lowest latency), then sched_yield (ranks are often
  // oversubscribed: the peer we wait for may need this core), and only once idle for
  // kSleepAfter seconds (a straggler, not a message in flight) short sleeps. Sleeping earlier
  // costs tens of microseconds per wake-up (timer slack), measured on the small-message path.
  constexpr double kSleepAfter = 1e-3;
  int idle = 0;
  int sleep_us = 1;
  double idle_since = 0;
  while (!finished_) {
    bool progressed = false;
    SKIPRING_RETURN_IF_ERROR(progress(&progressed));
    if (progressed) {
      idle = 0;
      sleep_us = 1;
      continue;
    }
    if (++idle <= options_.poll_spins) continue;
    const double now = clock_->now();
    SKIPRING_RETURN_IF_ERROR(check_watchdog(now));
    if (idle == options_.poll_spins + 1) idle_since = now;
    if (options_.idle_sleep_us == 0 || now - idle_since < kSleepAfter) {
      sched_yield();
      continue;
    }
    // Sleep, growing to the configured bound, never past the core's next timer.
    int us = sleep_us;
    const double until = next_wakeup() - now;
    if (until < us * 1e-6) us = std::max(0, static_cast<int>(until * 1e6));
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    sleep_us = std::min(sleep_us * 2, options_.idle_sleep_us);
  }
  return Status::kOk;
#endif
}

}  // namespace skipring
