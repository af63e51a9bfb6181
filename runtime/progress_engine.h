// The per-rank progress engine: executes a collective core's actions on a transport, polls
// for completions and feeds them back as events, stamps every event with the clock, and
// backs off (spin, then yield, then short sleeps) when idle so oversubscribed ranks do not
// starve each other. progress() never blocks; run() loops on it.
//
// SimGrid SMPI build (SKIPRING_SIMGRID): simulated time advances only while a rank blocks in
// SimGrid, so an idle engine never spins or yields. It blocks until one of its operations
// completes or its next timer is due (sim/smpi_wait.h: exact, and one wake-up per event), or,
// with sim_block off or no loopback link to time with, sleeps sim_poll_s of simulated time
// between polls (never past its next timer), which bounds how late it sees a message. Every
// reduction is charged as simulated compute time, bytes / sim_reduce_gbps.
#pragma once

#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/collective_core.h"
#include "runtime/clock.h"
#include "runtime/config.h"
#include "runtime/transport.h"
#include "straggler/msglog.h"

namespace skipring {

// What the engine needs of the configuration, passed in (engine_options(global_config()) at
// the call sites that run under a configuration); the defaults are Config's.
struct EngineOptions {
  int poll_spins = 200;    // idle polls before yielding
  int idle_sleep_us = 20;  // longest sleep when idle (0: never sleep, only yield)
  // SMPI build only.
  double sim_reduce_gbps = 2.73;  // reduction rate charged as simulated compute, GB/s
  double sim_poll_s = 100e-9;     // simulated time between polls when idle (polling)
  bool sim_block = true;          // block when idle (false: poll)
  // The watchdog (check_watchdog): seconds without progress before a collective fails with
  // kErrTimeout (0: never), and whether to MPI_Abort instead.
  double timeout_s = 300;
  bool abort_on_timeout = false;
};

// The options SKIPRING_POLL_SPINS, SKIPRING_IDLE_SLEEP_US, SKIPRING_TIMEOUT,
// SKIPRING_ON_TIMEOUT and SKIPRING_SIM_* give.
EngineOptions engine_options(const Config& cfg);

// Straggler injection: extra delay (seconds) before the first message a step sends, given
// the step's phase and index. Returns 0 for no delay. The engine holds the step's sends back
// until the delay has passed (virtual time in the harness, real or simulated time under MPI).
using StepDelayFn = std::function<double(Phase phase, int step)>;

class ProgressEngine {
 public:
  ProgressEngine(Transport* transport, const Clock* clock, EngineOptions options);

  // Starts `core` (which must outlive the collective) and executes its first actions.
  Status begin(CollectiveCore* core);
  // One non-blocking pass: poll, feed events, execute actions, fire timers. *progressed is
  // true when anything happened.
  Status progress(bool* progressed);
  // begin() then progress() with back-off until the core is done. When it fails, the
  // transport is told (Transport::abandon) before it returns: the caller's buffers are
  // released after that.
  Status run(CollectiveCore* core);
  // Delay hook for the next collectives (empty: none).
  void set_step_delay(StepDelayFn fn) { step_delay_ = std::move(fn); }
  // Earliest time the engine must act without an incoming event (a core timer or the end of
  // an injected delay); +inf when none.
  double next_wakeup() const;

  bool finished() const { return finished_; }

  // The watchdog. Progress is an event: a message completed or a held send released; the
  // core's timers are not progress. With no progress for half the timeout (at most 30 s) it
  // logs at warn level what the collective waits for (CollectiveCore::describe_wait), again
  // every tenth of the timeout (at most 10 s); at EngineOptions::timeout_s it logs the error,
  // cancels this rank's receives of the collective (they could otherwise write into the
  // caller's buffers later) and returns kErrTimeout, or calls MPI_Abort (abort_on_timeout).
  // The engine forgets the core then: the caller must treat its communicator as broken (sends
  // may still be in flight). run() calls it when idle (in its back-off, where it reads the
  // clock anyway); a driver of progress() calls it itself. Cheap: a subtraction and a compare
  // until the first warning is due.
  Status check_watchdog(double now) {
    return now - last_event_ < watch_from_ ? Status::kOk : watchdog(now);
  }
  // The message of the last timeout ("no progress for ... s (SKIPRING_TIMEOUT=...): what the
  // collective waits for"); empty when none.
  const std::string& timeout_message() const { return timeout_message_; }

 private:
  Status watchdog(double now);
  Status run_until_done(CollectiveCore* core);  // run() less the failure handling
  Status execute(ActionList* actions);
  // SKIPRING_MSGLOG: remembers a posted message / writes a completed one (log_ set).
  void log_posted(const Action& a);
  void log_completed(const Completion& c, double now);
  Status post(const Action& a);
#ifdef SKIPRING_SIMGRID
  Status sim_step(bool* progressed);        // progress(), waiting in simulated time
  void sim_sleep(double seconds);           // sleep in simulated time
  void sim_warn_polling(const char* why);   // once per rank
  void sim_charge_reduce(const Action& a);  // the reduction's simulated compute time
#endif

  struct Held {
    double release;
    Action action;
  };
  StepDelayFn step_delay_;
  std::vector<char> delayed_steps_;  // per (phase, step): delay already decided
  std::deque<Held> held_;            // sends held back by an injected delay, in order
  double last_release_ = 0;          // end of the latest injected delay

  Transport* transport_;
  const Clock* clock_;
  EngineOptions options_;
  CollectiveCore* core_ = nullptr;
  bool finished_ = false;
  std::vector<Completion> completions_;
  ActionList actions_;

  // Watchdog state (check_watchdog).
  double watch_from_;               // idle seconds before the first warning (+inf: off)
  double last_event_ = 0;           // clock time of the last progress
  double watch_base_ = -1;          // the last_event_ the warnings below count from
  double next_warn_ = 0;            // idle seconds of the next warning
  std::vector<Token> recv_tokens_;  // receives posted in this collective (cancelled on timeout)
  std::string timeout_message_;

  // The message log (SKIPRING_MSGLOG; null: off), read when a collective begins.
  struct Posted {
    double t;
    int peer;
    int tag;
    size_t bytes;
  };
  MessageLog* log_ = nullptr;
  int engine_id_;
  std::unordered_map<Token, Posted> posted_;
};

}  // namespace skipring
