// The late path's per-call plan (late_plan.h).
#include "collectives/late_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "collectives/late_chain.h"

namespace skipring {

std::string LatePlan::to_string() const {
  if (!late_path)
    return rested ? "no late path (the census rests: the plain ring)" : "no late path";
  return fmt::format(
      "late path: census wait {:.1f} us (suspects {:.1f} us), segment {} B, {} in flight",
      wait_s * 1e6, wait_suspect_s * 1e6, segment_bytes, inflight);
}

double late_wait_share(int n) {
  if (n < 3) return kLateWaitShareMin;
  const double extra = static_cast<double>(n - 2) / (2.0 * (n - 1) * (n - 1));
  return std::max(kLateWaitShareMin, kLateWaitExtraFactor * extra);
}

std::vector<double> suspects_seen(const std::vector<double>& seen,
                                  const std::vector<uint32_t>& streak) {
  std::vector<double> out = seen;
  for (size_t r = 0; r < out.size(); ++r) {
    if (r >= streak.size() || streak[r] < kSuspectStreak) out[r] = std::min(out[r], 0.0);
  }
  return out;
}

std::vector<uint32_t> next_streak(const std::vector<uint32_t>& streak,
                                  const std::vector<int>& excluded, int n) {
  std::vector<uint32_t> out(static_cast<size_t>(n), 0);
  for (int r : excluded) {
    const size_t i = static_cast<size_t>(r);
    out[i] = (i < streak.size() ? streak[i] : 0) + 1;
  }
  return out;
}

bool census_probe(uint64_t call, uint32_t shift) {
  // One census in each window of 2^shift calls, at an offset that splitmix64's finaliser draws
  // from the window's number: never more than 2^(shift + 1) - 1 calls between two, and no fixed
  // period for a periodic straggler to lock onto.
  const uint32_t s = std::clamp<uint32_t>(shift, 1, kCensusProbeShiftMax);
  const uint64_t mask = (uint64_t{1} << s) - 1;
  uint64_t z = (call >> s) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (call & mask) == (z & mask);
}

bool CensusBackoff::rests() const {
  if (search > 0) return false;
  // The straggler is expected (a multiple of the period after the last take-out), or may be (a
  // divisor of it: the probes that found the gaps may have missed late calls in between).
  if (period > 0 &&
      (since % period == 0 || (since > kCensusQuietBeforeRest && period % since == 0)))
    return false;
  if (quiet < kCensusQuietBeforeRest) return false;
  return !census_probe(calls, kCensusProbeShiftMax);
}

void CensusBackoff::take_out(uint32_t gap) {
  // A period divides every gap between take-outs: the greatest common divisor of the gaps, if
  // it leaves room for the quiet censuses.
  const bool fresh = !taken_any || gap > kCensusPeriodMax;
  uint32_t g = 0;
  if (!fresh) g = period > 0 ? std::gcd(gap, period) : gap;
  period = g > kCensusQuietBeforeRest ? g : 0;
  if (fresh) searched = false;
  if (period > 0) {
    search = 0;
  } else if (!searched) {
    search = kCensusSearchCalls;
    searched = true;
  }
  taken_any = true;
  quiet = 0;
}

void CensusBackoff::after_census(bool taken_out) {
  ++calls;
  if (search > 0) --search;
  if (taken_out) {
    take_out(since);
    since = 1;
    return;
  }
  // The expected straggler did not come: forget the period.
  if (expected()) period = 0;
  quiet = std::min<uint32_t>(quiet + 1, 64);
  since = std::min<uint32_t>(since + 1, kCensusPeriodMax + 1);
}

void CensusBackoff::after_rest() {
  ++calls;
  if (search > 0) --search;
  since = std::min<uint32_t>(since + 1, kCensusPeriodMax + 1);
}

void CensusBackoff::saw_late_rest(uint32_t ago) {
  // `since` counts from the last take-out to the next call, so a take-out after the rested call
  // leaves it at most `ago`: that census already brought the census back.
  if (ago == 0 || ago > calls || (taken_any && since <= ago)) return;
  take_out(taken_any && since <= kCensusPeriodMax ? since - ago : kCensusPeriodMax + 1);
  since = ago;
}

LatePlan plan_late_path(const LatePlanInput& in) {
  LatePlan plan;
  if (!in.skip || !in.skipring || in.n < 2) return plan;
  if (in.late_chain == 0) return plan;
  if (in.late_chain < 0) {
    // auto: across hosts, from kLateChainMinBytes, where the census costs at most
    // kLateChainMaxCensusShare of the ring's modelled time (under SimGrid at n = 4, 1 MiB, it
    // cost 11 of 147 us).
    // Not at n = 2: the census takes a rank out only while the healthy ranks stay a strict
    // majority (LateChainAllreduce::decision_time), which two ranks never are.
    if (in.n < 3 || in.hosts <= 1 || in.bytes < kLateChainMinBytes) return plan;
    if (!std::isfinite(in.ring_model_s) ||
        in.census_s > kLateChainMaxCensusShare * in.ring_model_s) {
      return plan;
    }
    plan.rested = in.census_rest;
  }
  plan.late_path = !plan.rested;
  const double usual = std::isfinite(in.usual_s) ? std::max(0.0, in.usual_s) : 0.0;
  plan.wait_s = in.late_wait_us > 0 ? in.late_wait_us * 1e-6
                                    : std::max(in.skip_floor_s, late_wait_share(in.n) * usual);
  const double suspect = in.late_wait_suspect_us > 0
                             ? in.late_wait_suspect_us * 1e-6
                             : std::max(in.suspect_floor_s, kLateWaitSuspectShare * usual);
  plan.wait_suspect_s = std::min(plan.wait_s, suspect);
  plan.segment_bytes =
      in.late_segment_bytes > 0
          ? in.late_segment_bytes
          : std::min(in.segment_bytes > 0 ? in.segment_bytes : kLateChainSegmentBytes,
                     kLateChainSegmentBytes);
  // A late rank's window: kLateChainInflight, or one piece per owner where there are more
  // owners (n - 1), at most kLateChainMaxInflight.
  plan.inflight = in.late_inflight > 0
                      ? in.late_inflight
                      : std::max(kLateChainInflight, std::min(in.n - 1, kLateChainMaxInflight));
  return plan;
}

}  // namespace skipring
