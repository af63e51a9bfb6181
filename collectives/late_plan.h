// The per-call plan of the late path (issue 38): whether an all-reduce runs behind the census
// (collectives/late_chain.h) and with which waits, segment and window. A pure function of
// values every rank agrees on (configuration, size, topology, cost model) plus the driver's
// memory of earlier calls, so the harness tests it without MPI and the communicator only fills
// the input and copies the plan into RingParams.
#pragma once

#include <cstddef>
#include <string>

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
};

struct LatePlan {
  bool late_path = false;     // run LateChainAllreduce
  double wait_s = 0;          // RingParams::late_wait_s
  double wait_suspect_s = 0;  // RingParams::late_wait_suspect_s (<= wait_s)
  size_t segment_bytes = 0;   // RingParams::late_segment_bytes
  int inflight = 1;           // RingParams::late_inflight
  std::string to_string() const;
};

// The census's wait as a share of the usual time (SKIPRING_LATE_WAIT_US=0) and, for a rank that
// was late beyond the wait last time, the short wait's share (SKIPRING_LATE_WAIT_SUSPECT_US=0).
// The healthy ranks' links idle during the wait, and their late-path work (about 2S per link)
// starts only after it, so what a rank later than the wait costs after its arrival is about
// wait + 2S/B - lateness: under SimGrid (n = 16, 16 MiB) a quarter of the usual time gave 1.42 /
// 1.51x the floor at 0.25 / 0.5 T0, a tenth 1.20 / 1.21x, a twentieth 1.13 / 1.13x. A rank
// just later than the wait costs up to (n - 2) / (2 (n - 1)^2) T0 over the plain ring whatever
// the wait (the late path's 2S per link against the ring's 2(n - 1)/n S), so a shorter wait
// only moves that point; the skip threshold's floor (SKIPRING_SKIP_MIN_WAIT_US, 5 ms where
// ranks outnumber cores) keeps it above scheduling jitter.
constexpr double kLateWaitShare = 0.05;
constexpr double kLateWaitSuspectShare = 0.02;

LatePlan plan_late_path(const LatePlanInput& in);

}  // namespace skipring
