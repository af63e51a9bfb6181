// The per-call plan of the late path (issue 38): whether an all-reduce runs behind the census
// (collectives/late_chain.h) and with which waits, segment and window. A pure function of
// values every rank agrees on (configuration, size, topology, cost model) plus the driver's
// memory of earlier calls, so the harness tests it without MPI and the communicator only fills
// the input and copies the plan into RingParams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace skipring {

struct LatePlanInput {
  bool skip = false;        // skip-ahead runs in this call (SKIPRING_SKIP and the algorithm's row)
  bool skipring = false;    // the algorithm is the ring with skip-ahead (not hier, tree, ...)
  size_t bytes = 0;         // the all-reduce's size
  int n = 1;                // ranks
  int hosts = 1;            // distinct hosts
  int late_chain = -1;      // SKIPRING_LATE_CHAIN: -1 auto, 0 off, 1 on
  double late_wait_us = 0;  // SKIPRING_LATE_WAIT_US (0: derived)
  double late_wait_suspect_us = 0;  // SKIPRING_LATE_WAIT_SUSPECT_US (0: derived)
  size_t late_segment_bytes = 0;    // SKIPRING_LATE_SEGMENT_BYTES (0: derived)
  int late_inflight = 0;            // SKIPRING_LATE_INFLIGHT (0: derived)
  size_t segment_bytes = 0;         // SKIPRING_SEGMENT_BYTES
  double ring_model_s = 0;          // the ring's modelled time of this size (+inf: not modelled)
  double census_s = 0;  // the census's modelled cost: two latencies and 2n engine messages
  // The reference time of this size: the fastest call seen with nobody taken out, else the
  // model's (0: none).
  double usual_s = 0;
  double skip_floor_s = 0;  // the skip threshold's floor (the smallest wait worth a decision)
  // The suspects' floor: SKIPRING_SKIP_MIN_WAIT_US as configured, without the oversubscription
  // raise that skip_floor_s may carry (kLateWaitSuspectShare below says why).
  double suspect_floor_s = 0;
  // The census rests at this call (CensusBackoff::rests): in auto, a call that would run behind
  // the census runs the plain ring (no skip-ahead).
  bool census_rest = false;
};

struct LatePlan {
  bool late_path = false;     // run LateChainAllreduce
  double wait_s = 0;          // RingParams::late_wait_s
  double wait_suspect_s = 0;  // RingParams::late_wait_suspect_s (<= wait_s)
  size_t segment_bytes = 0;   // RingParams::late_segment_bytes
  int inflight = 1;           // RingParams::late_inflight
  // auto would have run the census, but it rests (CensusBackoff): the call runs the plain ring
  // (the communicator turns skip-ahead off for it). The fields above are filled all the same:
  // wait_s is what tells whether a rank came later than the census would have waited
  // (CensusBackoff::saw_late_rest).
  bool rested = false;
  std::string to_string() const;
};

// The census's wait as a share of the usual time (SKIPRING_LATE_WAIT_US=0), late_wait_share(n),
// and, for a rank that was late beyond the wait last time, the short wait's share
// (SKIPRING_LATE_WAIT_SUSPECT_US=0).
//
// While the census waits no link moves data, and the healthy ranks' late-path work (about 2S per
// link) starts only after it, so a rank later than the wait costs about wait + 2S/B - lateness
// after its arrival: the shorter the wait, the nearer the floor (SimGrid n = 16, 16 MiB: a
// quarter of the usual time gave 1.42 / 1.51x the floor at 0.25 / 0.5 T0, a twentieth 1.13x).
// But a rank that comes just after the wait costs more than the plain ring would have after its
// arrival: the late path's 2S per link against the ring's 2(n - 1)/n S, (n - 2) / (2 (n - 1)^2)
// T0 in a pure bandwidth model (0.11 at n = 4, 0.06 at 8, 0.03 at 16), and over TCP on 4
// emulated hosts about 2.5 times that (16 MiB, 20 / 40 ms late with a 10 ms wait: 1.24 / 1.13x
// the plain ring). As in ski rental, the wait is that extra cost: kLateWaitExtraFactor times the
// model's, at least kLateWaitShareMin (0.25 at n = 4, 0.14 at 8, 0.07 at 16, 0.05 from 24).
constexpr double kLateWaitShareMin = 0.05;
constexpr double kLateWaitExtraFactor = 2.25;
double late_wait_share(int n);
//
// A suspect (later than the wait last time) gets kLateWaitSuspectShare once every other rank is
// in, at least suspect_floor_s: not the oversubscription floor (5 ms) of skip_floor_s, which
// keeps a descheduled rank from being taken for a straggler; a suspect has already shown it is
// one, and every ms of this wait is a ms of the healthy ranks' head start lost. 4 emulated hosts
// on 2 cores (oversubscribed), 4 MiB, rank 1 20 ms late at every call, 3 interleaved runs:
// 51.7 ms after the arrival with the 5 ms floor, 46.2 ms with 1 ms (the plain ring 56 ms).
constexpr double kLateWaitSuspectShare = 0.02;

LatePlan plan_late_path(const LatePlanInput& in);

// The census rests while nobody is taken out (SKIPRING_LATE_CHAIN=auto). A census that keeps
// every rank in costs its two header hops and the ring's head start (the healthy ranks' steps
// that do not depend on a late rank) and buys nothing: over TCP (4 emulated hosts, 1 Gbit/s) 1.5 %
// with no straggler and 4-5 % for a 4 MiB call whose rank comes 5-10 ms late (within the wait),
// where skip-ahead's ring alone is 0.99-1.02x the plain ring. Only a census that takes a rank
// out pays (0.8x the ring from 20 ms at 4 MiB; skip-ahead's ring alone gains nothing there).
// A rested call runs the plain ring, not skip-ahead's ring: over TCP skip-ahead's ring alone
// gains nothing measurable and loses once it skips (a rank 200 ms late after nine quiet calls,
// 4 MiB: 1.00-1.09x the plain ring with 27 skips a call; 16 MiB 80-200 ms late at every call:
// 1.01-1.27x), so a rested call costs the plain ring's time whoever comes late (under SimGrid,
// where the census is nearly free, the rests cost a training loop 2-4 % of its communication:
// docs/experiments.md).
//
// When it rests, from the decisions (so the same on every rank), call by call:
// - From the kCensusQuietBeforeRest-th census in a row that takes nobody out, a call rests
//   unless it is a probe: one call in each aligned window of 8 (2^kCensusProbeShiftMax), at an
//   offset drawn from a hash of the window's number (census_probe). Until 6503b40 the windows
//   grew from 2 to 4 to 8 as the quiet censuses went on, to take a new straggler out sooner; the
//   rested calls' agreement (below) does that now, and the early probes cost a communicator's
//   first calls about 1 % over TCP when a rank is kept in (4 emulated hosts, 8 calls after 2
//   warm-ups, skip/ring: 4 MiB 10 ms late 1.015 against 1.023, 16 MiB 10 ms 1.011 / 1.021, no
//   straggler 1.001 / 1.009; medians of 4-5 runs in turn). Four, not one or two: a straggler drawn
//   at random every call (training with exponential lateness, mean 20 ms, on 4 emulated hosts: the
//   census took it out in about 2 calls of 3) gives two quiet censuses in a row often, and resting
//   from the second cost that training more than the census (paired per step against a census at
//   every call: +5 ms at 0-10 ms of lateness against +2, -0.5..-4.3 ms at 15-45 ms against
//   -5.7..-7.1); from the fourth it is even with it (epoch 4.87 against 4.86 s). And a program's
//   first call is often a warm-up nobody is late for.
// - A straggler periodic in the calls (a bucketed training loop whose rank comes late before
//   the first of B buckets each step: B - 1 quiet calls between its late ones) must not fall in
//   the rests at every period. The backoff keeps the greatest common divisor of the gaps (in
//   calls) between take-outs (`period`, while above kCensusQuietBeforeRest and the gaps at most
//   kCensusPeriodMax); a call a multiple of it after the last take-out runs the census (the
//   straggler is expected there), and so does one a divisor of it after (the probes that found
//   the gaps may have skipped late calls: the divisor finds the true period at once). An
//   expected call that finds nobody late forgets the period. Probes at a drawn offset, not rests
//   of a fixed length, because fixed rests lock onto a period: with rests of 8 calls (the rule
//   before 2b8f379) a straggler every 9 calls at another phase was never taken out again.
//   Counted over every period B from 5 to 32 and every phase (tests/unit/test_late_chain.cpp),
//   no late call rests after the first 2000 calls.
// - A rested call tells the backoff what it saw: after it the ranks agree (one nonblocking MAXLOC
//   all-reduce of how long after each rank's start its ring predecessor's first piece came, and
//   of the census coordinator's wait, read kRestAgreementLag calls later, so that nobody waits
//   for it) whether a rank came later than the census would have waited, and if so it counts as a
//   take-out there (saw_late_rest; the communicator also notes who, for a period's streak). Without
//   it a straggler that the rests skipped left no trace: the period was learnt only once a probe
//   had landed on two of its late calls (of its first ten late calls after a quiet spell, 20-50 %
//   taken out; with it, 80-100 %, census_periods --start 40).
// - A fresh take-out (the first, or the first for more than kCensusPeriodMax calls) with no
//   period opens a search window: the census at every call for kCensusSearchCalls calls, so that
//   a period up to that long is found at the straggler's second late call. Once per fresh
//   take-out: a straggler late at random calls does not keep it open.
// - A census that takes a rank out brings it back at every call for the next four calls.
constexpr uint32_t kCensusQuietBeforeRest = 4;
constexpr uint32_t kCensusProbeShiftMax = 3;
constexpr uint32_t kCensusPeriodMax = 1024;
constexpr uint32_t kCensusSearchCalls = 32;
// A rested call's agreement on lateness (CensusBackoff::saw_late_rest) is read at the plan of
// the call this many counted calls after it: the call in between progresses it.
constexpr uint32_t kRestAgreementLag = 2;
// Whether call number `call` of a backoff resting with windows of 2^shift calls
// (1..kCensusProbeShiftMax; the backoff uses kCensusProbeShiftMax) runs the census: one call in
// each aligned window of 2^shift, at an offset hashed from the window's number (the same on
// every rank).
bool census_probe(uint64_t call, uint32_t shift);
struct CensusBackoff {
  uint32_t quiet = 0;      // censuses in a row that took nobody out (saturates at 64)
  uint64_t calls = 0;      // calls counted (census or rested): the probes' clock
  bool taken_any = false;  // a census has taken a rank out
  uint32_t since = 0;      // the next call's distance from the last take-out (saturates)
  // The greatest common divisor of the gaps between take-outs since the last expected call
  // that found nobody late, if above kCensusQuietBeforeRest (0: none): a straggler periodic in
  // the calls.
  uint32_t period = 0;
  // Calls left in the search window: after a fresh take-out (the first, or the first for more
  // than kCensusPeriodMax calls) with no period known, the census runs at every call for
  // kCensusSearchCalls calls, so that a period up to that long is learnt at the straggler's
  // second late call (by the probes alone, a probe must land on two of its late calls). Once per
  // fresh take-out (`searched`): a straggler late at random calls does not keep it open.
  uint32_t search = 0;
  bool searched = false;
  // The next call is one where a periodic straggler is expected (a multiple of `period` after
  // the last take-out): the census runs there, and the communicator gives the ranks that the
  // period's take-outs took out the suspects' short wait (suspects_seen).
  bool expected() const { return period > 0 && since % period == 0; }
  // Whether the next call rests (LatePlanInput::census_rest).
  bool rests() const;
  // A census decided (`taken_out`: its E was not empty).
  void after_census(bool taken_out);
  // A call that the plan rested (LatePlan::rested).
  void after_rest();
  // A rested call `ago` calls back (1: the last one counted) had a rank later than the census's
  // wait (the ranks agree on it after the call: StragglerMemory::RestAgreement and
  // Communicator::read_rest_agreements): counted as a
  // take-out there (the period's gaps, the quiet censuses, the search window), unless a census
  // has taken a rank out since.
  void saw_late_rest(uint32_t ago);

 private:
  // The take-out's part of after_census: `gap` calls after the last take-out.
  void take_out(uint32_t gap);
};

// Who counts as a suspect: a rank the census took out in each of the last kSuspectStreak calls
// (`streak`: consecutive decisions that took it out, from the decisions, the same on every rank).
// Returns `seen` (RingParams::late_seen_s, what the coordinator measured) with every other rank's
// lateness 0, so that the census gives it the full wait. One exclusion is not enough: with 4
// ranks computing on 2 cores (4 emulated hosts, no straggler), a rank descheduled past the wait
// once came a few ms after the others the next call too, and the suspects' short wait took it
// out again (the late path at a lateness of a few ms costs up to 1.16x the plain ring).
constexpr uint32_t kSuspectStreak = 2;
std::vector<double> suspects_seen(const std::vector<double>& seen,
                                  const std::vector<uint32_t>& streak);
// The streak after a decision that took out `excluded` (of n ranks): one more for each of them,
// 0 for every other rank (`streak` may be shorter than n: missing entries count as 0).
std::vector<uint32_t> next_streak(const std::vector<uint32_t>& streak,
                                  const std::vector<int>& excluded, int n);

}  // namespace skipring
