// The per-rank progress engine: executes a collective core's actions on a transport, polls
// for completions and feeds them back as events, stamps every event with the clock, and
// backs off (spin, then yield, then short sleeps) when idle so oversubscribed ranks do not
// starve each other. progress() never blocks; run() loops on it.
#pragma once

#include <deque>
#include <vector>

#include "collectives/collective_core.h"
#include "runtime/clock.h"
#include "runtime/transport.h"

namespace skipring {

struct EngineOptions {
  int poll_spins = 200;     // idle polls before yielding
  int idle_sleep_us = 20;   // longest sleep when idle (0: never sleep, only yield)
};

class ProgressEngine {
 public:
  ProgressEngine(Transport* transport, const Clock* clock, EngineOptions options);

  // Starts `core` (which must outlive the collective) and executes its first actions.
  Status begin(CollectiveCore* core);
  // One non-blocking pass: poll, feed events, execute actions, fire timers. *progressed is
  // true when anything happened.
  Status progress(bool* progressed);
  // begin() then progress() with back-off until the core is done.
  Status run(CollectiveCore* core);

  bool active() const { return core_ != nullptr && !finished_; }
  bool finished() const { return finished_; }

 private:
  Status execute(ActionList* actions);

  Transport* transport_;
  const Clock* clock_;
  EngineOptions options_;
  CollectiveCore* core_ = nullptr;
  bool finished_ = false;
  std::vector<Completion> completions_;
  ActionList actions_;
};

}  // namespace skipring
