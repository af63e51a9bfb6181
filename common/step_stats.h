// Per-step timing records of one collective on one rank: what the progress engine measured
// (wait for the predecessor, reduce, transfer). The straggler detector and the experiment
// tools read these. Base layer: no MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/phases.h"

namespace skipring {

struct StepRecord {
  Phase phase = Phase::kReduceScatter;
  int step = 0;    // 0..n-2 within the phase
  int chunk = -1;  // chunk received in this step
  int from = -1;   // rank the data came from
  int to = -1;     // rank the result went to (-1 when kept)
  int segments = 0;
  double wait_s = 0;         // time ready-to-receive until the data arrived, summed over segments
  double reduce_s = 0;       // reduction kernel time
  double transfer_s = 0;     // send posted until completed (sends of this step)
  double first_arrival = 0;  // clock time of the first segment's arrival
  double last_arrival = 0;
  double t_start = 0;   // clock time this rank was ready for the step (its first receive posted)
  double t_end = 0;     // clock time its last segment was reduced / forwarded
  int skips = 0;        // pieces of this step this rank forwarded without waiting (skip-ahead)
  int late_pieces = 0;  // pieces that arrived after this rank had already forwarded
};

// Totals per neighbour (who we waited for).
struct NeighbourStats {
  int rank = -1;
  double wait_s = 0;
  int steps = 0;
};

struct CollectiveStats {
  uint64_t seq = 0;
  uint64_t bytes = 0;
  int algo = -1;  // the Algo (collectives/algorithms.h) that ran; -1: not set by the driver
  double start = 0;
  double end = 0;
  double wait_s = 0;
  double reduce_s = 0;
  double transfer_s = 0;
  uint32_t messages_sent = 0;
  uint32_t messages_received = 0;
  uint32_t skips = 0;
  uint32_t late_pieces = 0;
  uint32_t bypass_requests = 0;  // late-rank bypasses this rank asked for (0 or 1)
  uint32_t direct_segments =
      0;  // own final segments sent straight to every rank (direct allgather)
  // Skip-ahead's allgather receive window (RingAllreduce::sync_ag_window): 0 kept throughout,
  // 1 opened because a straggler was around (this rank disturbed, or a segment came on a
  // route other than the ring), 2 opened by the stall timer.
  uint8_t ag_window_opened = 0;
  // Late chain (collectives/late_chain.h): ranks the census took out of the ring (0: none).
  uint32_t late_excluded = 0;
  int slowest_neighbour = -1;  // rank waited for longest (-1: none)
  // Longest wait (from the timer's start: max(receive posted, previous piece from the
  // predecessor)) over the reduce-scatter ring pieces this rank could skip and did not: the
  // normal step time the skip threshold is derived from (0: none).
  double rs_piece_wait_max = 0;
  // The predecessor was behind in this collective (late or slow by more than 2 thresholds):
  // rs_piece_wait_max is 0 then, nothing of it is a normal step time.
  bool pred_behind = false;
  // The ring's predecessor's first reduce-scatter piece came this long after this rank started
  // the collective (-1: none came, or not a ring): about how much later the predecessor arrived
  // (plus one piece's transfer), whatever the rest of the call took. The census's rested calls
  // agree on it (runtime/communicator_straggler.cpp, start_rest_agreement).
  double pred_first_s = -1;
  double skip_threshold_s = 0;  // threshold this collective used (0: skip-ahead off)
  std::vector<StepRecord> steps;
  std::vector<NeighbourStats> neighbours;

  double time_s() const { return end - start; }
  // Recomputes the totals and per-neighbour rows from `steps`.
  void summarise();
  std::string to_string() const;
};

}  // namespace skipring
