// Measures the cost model's parameters (collectives/select.h) once, at communicator setup:
// per-message latency and bandwidth by ping-pong between ring neighbours (same host and, when
// the ring crosses hosts, between hosts), and the reduction rate by timing the kernel. Every
// rank then takes the slowest value of each (one all-reduce), so every rank holds the same
// parameters and makes the same algorithm choice. SKIPRING_MODEL_* values replace measured
// ones.
#pragma once

#include <mpi.h>

#include <vector>

#include "collectives/select.h"
#include "common/status.h"
#include "runtime/clock.h"
#include "runtime/config.h"

namespace skipring {

constexpr int kProbeTag = 0x5100;

// ring: ring order; host_of_rank: dense host id per rank (empty: all on one host).
// Collective over `comm`. A failure on any rank is returned on every rank (the closing
// all-reduce carries a failure flag): the ranks never disagree on whether it worked.
Status measure_cost_params(MPI_Comm comm, const std::vector<int>& ring,
                           const std::vector<int>& host_of_rank, const Config& cfg,
                           const Clock& clock, CostParams* out);

}  // namespace skipring
