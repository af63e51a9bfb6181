// The all-reduce algorithms, listed once: one row per algorithm with its id, its name (what
// SKIPRING_ALGO, skipring_set_algo and the statistics use), a one-line description, its cost
// in the alpha-beta-gamma model (collectives/select.h) and a factory that builds its core.
// Selection (auto), the SKIPRING_ALGO parser and its error text, skipring_info --algo and the
// communicator's dispatch all read this table.
//
// Adding an algorithm: its id at the end of Algo (and kAlgoCount), its row in algorithms.cpp
// (at the index of its id: a static_assert checks the order and the count), its cost function
// in select.cpp and the core itself. test_algorithms.cpp checks that every id has exactly one
// row, that the names are unique and parse back, and auto's choices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace skipring {

class CollectiveCore;
struct CostParams;
struct MultiTreePlan;
struct RingParams;
struct TopologySummary;

// SKIPRING_ALGO: which all-reduce algorithm runs; kAuto picks by the cost model. The values
// are the row indices of algo_table() and what CollectiveStats::algo records.
// kMpi is the MPI library's own all-reduce (PMPI_Allreduce on skipring's duplicate of the
// communicator: runtime/communicator_mpi.cpp); where no MPI runs (the in-process harness) its
// factory builds the recursive doubling core, the algorithm its cost model is measured against.
enum class Algo : int {
  kAuto,
  kRing,
  kSkipRing,
  kRd,
  kRabenseifner,
  kTree,
  kMultiTree,
  kHier,
  kMpi
};
// The number of ids (one past the last: follows the last id).
constexpr int kAlgoCount = static_cast<int>(Algo::kMpi) + 1;

// What a factory builds a core from: the collective's parameters (skip and the skip threshold
// already decided) and the communicator's resources.
struct AlgoContext {
  const RingParams* params = nullptr;
  std::vector<uint8_t>* scratch = nullptr;         // reused across collectives
  const std::vector<int>* host_of_rank = nullptr;  // dense host id per rank
  // hier's local order per host (Topology::hier_groups: GPU-NIC leaders first); null or empty:
  // rank order.
  const std::vector<std::vector<int>>* host_groups = nullptr;
  // The multi-tree plan with at most k trees (k = 1: a single tree), planned on first use.
  std::function<Status(int k, const MultiTreePlan** out)> tree_plan;
  int multitree_k = 4;  // SKIPRING_MULTITREE_K
};

// Modelled time in seconds of `bytes` on the summarised topology; +inf when the algorithm
// cannot run there. Called with n >= 2 (one rank costs 0 whatever the algorithm).
using AlgoCostFn = double (*)(size_t bytes, const TopologySummary& topo, const CostParams& p,
                              size_t segment_bytes);
// Builds the algorithm's core for one collective.
using AlgoFactory = Status (*)(const AlgoContext& ctx, std::unique_ptr<CollectiveCore>* out);

struct AlgoRow {
  Algo id;
  const char* name;
  const char* description;  // one line
  AlgoCostFn cost;          // nullptr: auto (not an algorithm of its own)
  AlgoFactory make;         // nullptr: auto
  // > 0: auto compares this algorithm, in increasing order; a tie keeps the earlier (simpler)
  // one. 0: not compared (auto itself, and skipring, which is the ring with skip-ahead on).
  int select_order;
  // Runs skip-ahead when SKIPRING_SKIP is on.
  bool skip_ahead;
  // What auto reports, and runs, when it picks this algorithm with SKIPRING_SKIP on (the ring:
  // skipring; every other row names itself).
  Algo with_skip;
};

// Every row, in id order (algo_table()[i].id == Algo(i)).
const std::vector<AlgoRow>& algo_table();
const AlgoRow& algo_row(Algo a);

const char* algo_name(Algo a);
// Case-insensitive; false for a name no row has.
bool parse_algo(const std::string& text, Algo* out);
// Every name in table order joined by `sep` (what SKIPRING_ALGO accepts).
std::string algo_names(const char* sep = ", ");

}  // namespace skipring
