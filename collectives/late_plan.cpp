// The late path's per-call plan (late_plan.h).
#include "collectives/late_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

void CensusBackoff::after_census(bool taken_out) {
  if (taken_out) {
    quiet = 0;
    rest = 0;
    return;
  }
  // quiet saturates, so the shift stays far below 32.
  quiet = std::min<uint32_t>(quiet + 1, 16);
  rest = quiet < kCensusQuietBeforeRest
             ? 0
             : std::min<uint32_t>(kCensusRestMax, 1u << (quiet - kCensusQuietBeforeRest));
}

void CensusBackoff::after_rest() {
  if (rest > 0) --rest;
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
    if (in.census_rest > 0) {
      plan.rested = true;
      return plan;
    }
  }
  plan.late_path = true;
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
