// Algorithm selection from an alpha-beta-gamma cost model (seed 001; DESIGN.md section 4).
//
// Every algorithm's time for S bytes on n ranks is modelled as
//   messages on the critical path x (alpha + sigma)  +  bytes on the critical path x beta
//   + bytes reduced on the critical path x gamma
// with alpha the per-message latency, beta the time per byte of a point-to-point transfer,
// gamma the time per byte of a reduction and sigma the per-message software cost of the
// progress engine (0 for the direct recursive doubling, which has no engine). Two measured
// corrections: the ring overlaps transfers with reductions only when each rank has a core, and
// unsegmented algorithms pay memory speed once their messages leave the cache. Between hosts
// (when the communicator spans several) alpha and beta are the inter-host ones. The cost
// functions are pure, so the decision is the same on every rank as long as the parameters
// are (Communicator measures them once and agrees on them with one all-reduce).
//
// `auto` takes the cheapest applicable algorithm of the table (collectives/algorithms.h: the
// rows with a select order, each with its cost function below); `ring` and `skipring` are the
// same ring (skip-ahead on or off), auto reports `skipring` when SKIPRING_SKIP=1.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "collectives/algorithms.h"

namespace skipring {

struct CostParams {
  double alpha_s = 2e-6;        // per-message latency (same host)
  double beta_s = 1.0 / 5e9;    // seconds per byte (same host)
  double gamma_s = 1.0 / 10e9;  // seconds per byte reduced
  double inter_alpha_s = 2e-6;  // between hosts (= the same-host values on one host)
  double inter_beta_s = 1.0 / 5e9;
  double sigma_s = 1e-6;  // per-message cost of the progress engine (cores, not rd);
                          // measured by Communicator::measure_engine_sigma
  // Unsegmented algorithms slow down by mem_slowdown once a message exceeds cache_bytes (a
  // core's L2: the segmented ring and trees stay inside it).
  double cache_bytes = 2.0 * 1024 * 1024;
  double mem_slowdown = 1.0;
  // The MPI library's own all-reduce (the `mpi` row) against skipring's direct recursive
  // doubling, measured at each of kMpiProbeBytes (Communicator::measure_mpi_offsets): its time
  // minus the direct path's, per rank (negative: MPI is faster). +inf: not measured (auto never
  // picks `mpi`); between the probe sizes linear, above the largest +inf.
  static constexpr int kMpiProbes = 7;
  double mpi_offset_s[kMpiProbes] = {
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity()};
  std::string to_string() const;
};

// The message sizes at which the MPI library's all-reduce is measured (CostParams::mpi_offset_s).
// 2 and 4 KiB too: Open MPI's time jumps between 1 and 8 KiB (its shared-memory eager limit is
// 4 KiB), so a line from 1 to 8 KiB read the direct rd as faster at 2 KiB, where it took 1.45x
// MPI's time (np 2 here).
inline constexpr size_t kMpiProbeBytes[CostParams::kMpiProbes] = {8,    128,  1024, 2048,
                                                                  4096, 8192, 65536};
// The `mpi` row's cost is rd's plus the measured offset, less this share of rd's: auto hands a
// size to the MPI library unless the direct recursive doubling was measured faster by more than
// that. Where the probe cannot tell them apart (at 4 ranks on 2 cores its offsets move by tenths
// of a microsecond from run to run) skipring's rd adds nothing the MPI library's all-reduce lacks
// at these sizes (no skip-ahead), whereas a wrong rd cost 1.2-1.5x MPI's time (issue 40: "never
// slower than the MPI it replaces"); where rd is really faster (8-64 KiB here: 0.4-0.8x MPI's
// time) it is faster by more than this share.
inline constexpr double kMpiTieShare = 0.1;

struct TopologySummary {
  int n = 1;                        // ranks
  int hosts = 1;                    // distinct hosts
  int max_local = 1;                // most ranks on one host
  std::vector<int> ranks_per_host;  // per host its number of ranks (empty: {n})
  // False when a host runs more busy ranks than it has cores: a rank's transfers and
  // reductions then share a core instead of overlapping.
  bool overlap = true;
  // The hosts are joined by TCP sockets (RingParams::socket_links): set at communicator setup.
  bool socket_links = false;
  // Multi-tree plan (tree/multitree): number of trees, the tallest tree's height and the
  // aggregate rate in bytes/s of the plan (0: no plan, algorithm not applicable).
  int trees = 0;
  int tree_height = 0;
  double tree_rate_Bps = 0;
  int tree1_height = 0;  // the single-tree plan ("tree")
  double tree1_rate_Bps = 0;
};

// The cost model of each algorithm (the `cost` of its row in algo_table()), for n >= 2 ranks.
double cost_ring(size_t bytes, const TopologySummary& topo, const CostParams& p,
                 size_t segment_bytes);
double cost_rd(size_t bytes, const TopologySummary& topo, const CostParams& p,
               size_t segment_bytes);
double cost_rabenseifner(size_t bytes, const TopologySummary& topo, const CostParams& p,
                         size_t segment_bytes);
double cost_tree(size_t bytes, const TopologySummary& topo, const CostParams& p,
                 size_t segment_bytes);
double cost_multitree(size_t bytes, const TopologySummary& topo, const CostParams& p,
                      size_t segment_bytes);
double cost_hier(size_t bytes, const TopologySummary& topo, const CostParams& p,
                 size_t segment_bytes);
// The MPI library's all-reduce: the direct recursive doubling's modelled time plus the measured
// offset of MPI's at this size (CostParams::mpi_offset_s); +inf where it was not measured or above
// the largest probe size (there skipring's own algorithms, and skip-ahead, run).
double cost_mpi(size_t bytes, const TopologySummary& topo, const CostParams& p,
                size_t segment_bytes);
// The measured offset at `bytes` (linear between the probe sizes; +inf above the largest).
double mpi_offset_at(size_t bytes, const CostParams& p);

// Modelled time in seconds (the row's cost function; 0 on one rank); +inf when the algorithm
// cannot run here (e.g. hier on one host, tree without a plan) and for auto. `segment_bytes`
// is the pipeline segment of the ring and trees.
double algo_cost(Algo a, size_t bytes, const TopologySummary& topo, const CostParams& p,
                 size_t segment_bytes);

// The algorithm `auto` picks (never kAuto; kSkipRing for the ring when `skip` is on).
Algo select_algo(size_t bytes, const TopologySummary& topo, const CostParams& p,
                 size_t segment_bytes, bool skip, double* cost = nullptr);

// Straggler-aware auto (issue 16): on a communicator where late arrivals have been observed
// (`stragglers_seen`, agreed across ranks), the cheapest algorithm that runs skip-ahead (the
// ring; hier across hosts) replaces the model's choice when its modelled time is at most
// `max_ratio` times the choice's (max_ratio < 1: never). Without stragglers, with `skip` off or
// when the choice already skips ahead: select_algo's answer. Nor where the choice's modelled
// time is below `min_cost_s` (the caller passes SKIPRING_SKIP_MIN_WAIT_US, 50 us by default, the
// skip threshold's floor where ranks do not outnumber cores): a call that short can gain at most
// its own few microseconds after a late arrival, and there the model is least sure of the ring
// (one host, np 2, 64 KiB: modelled within 1.5x of recursive doubling, measured 20 us against 7,
// after a scheduling hiccup had counted as a late arrival: 1.1-1.2x Open MPI's all-reduce in 2
// of 5 runs). Nor with fewer than 3 ranks: with 2, the other rank's whole input is what each
// rank waits for, so skip-ahead has nothing to do meanwhile (the late path needs 3 ranks too).
// Pure, like select_algo: the same inputs give the same algorithm on every rank.
Algo select_algo_stragglers(size_t bytes, const TopologySummary& topo, const CostParams& p,
                            size_t segment_bytes, bool skip, bool stragglers_seen, double max_ratio,
                            double* cost = nullptr, double min_cost_s = 0);

// The algorithms the model compares: the rows with a select order, in that order (everything
// but kAuto and kSkipRing).
const std::vector<Algo>& modelled_algos();

// A text table: one row per size (8 B .. max_bytes, x4), the modelled time of each algorithm
// in microseconds and auto's choice.
std::string decision_table(const TopologySummary& topo, const CostParams& p, size_t segment_bytes,
                           bool skip, size_t max_bytes);

}  // namespace skipring
