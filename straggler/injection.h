// Straggler injection for experiments: the SKIPRING_INJECT rule language, its parser, and the
// deterministic plan that says how long a rank must stall at each point of each collective.
//
// SKIPRING_INJECT holds rules separated by ';', each rule key=value pairs separated by ',':
//   rank=R                       R an integer >= 0, or '*' for every rank (required)
//   delay=D                      fixed delay, D a number with a unit ns|us|ms|s (e.g. 2.5ms)
//   dist=exp:MEAN                exponential delay with mean MEAN
//   dist=uniform:LO:HI           uniform delay in [LO, HI]
//   dist=lognormal:MEDIAN:SIGMA  log-normal delay, SIGMA a plain number in [0, 10]
//                                (exactly one of delay / dist is required)
// Every duration (D, MEAN, LO, HI, MEDIAN) is finite, >= 0 and at most 1h (kMaxInjectDelay);
// inf, nan and larger values are rejected with a message naming the field. A draw from a
// distribution is capped at 1h (a long exp / lognormal tail cannot stall a rank for longer).
// A rank R must exist in the job: InjectPlan::check_ranks (run at init and by
// skipring_set_inject against MPI_COMM_WORLD's size) rejects R >= the number of ranks. On a
// smaller communicator a rule whose rank is outside it does not fire.
//   at=arrive|rs|ag|step         before entering the collective, each reduce-scatter step, each
//                                allgather step, or both kinds of step (default rs)
//   prob=P                       chance in [0, 1] that the rule fires at a point (default 1)
//   every=N                      only collectives with seq % N == 0 (N >= 1, default 1)
//   step=K                       only step K (0-based) of the phase(s) in `at` (default: every
//                                step; not with at=arrive). The paper's setting is one slow
//                                step: at=rs,step=0
//   seed=S                       uint64 seed of the rule's random stream (default 0)
// Example: SKIPRING_INJECT="rank=1,delay=2ms,at=rs;rank=*,dist=exp:100us,at=arrive,prob=0.1"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace skipring {

// The longest injected delay, in seconds: the bound on every duration of a rule and on every
// draw from a distribution.
inline constexpr double kMaxInjectDelay = 3600.0;
// The largest lognormal SIGMA accepted (exp(10 z) already spans 1e-37..1e37 over z in +-8.6).
inline constexpr double kMaxInjectSigma = 10.0;

// Where in a collective a delay is applied. at=step in a rule means both kReduceScatter and
// kAllgather.
enum class InjectPoint : uint8_t { kArrive = 0, kReduceScatter = 1, kAllgather = 2 };

struct InjectRule {
  enum class Dist : uint8_t { kFixed, kExp, kUniform, kLognormal };

  int rank = -1;  // -1: '*' (every rank)
  bool at_arrive = false;
  bool at_rs = true;
  bool at_ag = false;
  double prob = 1.0;
  uint64_t every = 1;
  int step = -1;  // -1: every step
  uint64_t seed = 0;
  // Delay model. kFixed: a = delay; kExp: a = mean; kUniform: a = lo, b = hi;
  // kLognormal: a = median, b = sigma. Durations are in seconds.
  Dist dist = Dist::kFixed;
  double a = 0;
  double b = 0;
  std::string text;  // the rule as written (trimmed), for messages

  bool applies_at(InjectPoint point) const;
};

class InjectPlan {
 public:
  // Parses `spec` (the value of SKIPRING_INJECT). An empty spec, or empty rules such as the one
  // after a trailing ';', give no rules. On error returns Status::kErrConfig, leaves *out
  // untouched and, when `error` is not null, sets it to a message naming SKIPRING_INJECT, the
  // rule (1-based index and text) and the key/value at fault.
  static Status parse(const std::string& spec, InjectPlan* out, std::string* error);

  // Checks every rule's rank against a job of `nranks` ranks: rank=R needs R < nranks ('*'
  // always fits). On error returns Status::kErrConfig and, when `error` is not null, a message
  // naming SKIPRING_INJECT, the rule (1-based index and text), the rank field and the range.
  Status check_ranks(int nranks, std::string* error) const;

  bool empty() const { return rules_.empty(); }
  const std::vector<InjectRule>& rules() const { return rules_; }

  // Delay in seconds that `rank` must add at `point` of step `step` (pass 0 for kArrive) of
  // collective `seq`. Deterministic: a rule's draws depend only on (rule seed, rank, seq, point,
  // step), through a counter-based hash, so every run and every process (in-process harness or
  // real MPI) gets the same answer. Rules sharing a seed share their random stream; give them
  // different seeds for independent draws. When several rules match, their delays add up.
  double delay(int rank, uint64_t seq, InjectPoint point, int step) const;

  // Canonical text of the plan (rules joined by ';', defaults left out except at=); parses back
  // to the same plan up to rounding of durations. Empty plan: "".
  std::string to_string() const;

 private:
  std::vector<InjectRule> rules_;
};

// Compact human text of a duration, with the largest unit of s/ms/us/ns that keeps the number
// >= 1 (e.g. 0.0025 -> "2.5ms", 0 -> "0s"). Parses back as an injection duration.
std::string format_duration(double seconds);

}  // namespace skipring
