// The algorithm table (see algorithms.h): one row per all-reduce algorithm.
#include "collectives/algorithms.h"

#include <cctype>
#include <iterator>

#include "collectives/hier_allreduce.h"
#include "collectives/rabenseifner.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "collectives/tree_allreduce.h"

namespace skipring {
namespace {

Status make_ring(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  *out = std::make_unique<RingAllreduce>(*c.params, c.scratch);
  return Status::kOk;
}

Status make_rd(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  *out = std::make_unique<RecursiveDoublingAllreduce>(*c.params, c.scratch);
  return Status::kOk;
}

Status make_rabenseifner(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  *out = std::make_unique<RabenseifnerAllreduce>(*c.params, c.scratch);
  return Status::kOk;
}

Status make_trees(const AlgoContext& c, int k, std::unique_ptr<CollectiveCore>* out) {
  const MultiTreePlan* plan = nullptr;
  SKIPRING_RETURN_IF_ERROR(c.tree_plan(k, &plan));
  *out = std::make_unique<TreeAllreduce>(*c.params, *plan, c.scratch);
  return Status::kOk;
}

Status make_tree(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  return make_trees(c, 1, out);
}

Status make_multitree(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  return make_trees(c, c.multitree_k, out);
}

Status make_hier(const AlgoContext& c, std::unique_ptr<CollectiveCore>* out) {
  *out = std::make_unique<HierAllreduce>(
      *c.params, *c.host_of_rank, c.scratch,
      c.host_groups != nullptr ? *c.host_groups : std::vector<std::vector<int>>{});
  return Status::kOk;
}

// clang-format off
constexpr AlgoRow kRows[] = {
    // id, name, description,
    //   cost, factory, select order (0: auto does not compare it), skip-ahead, with skip on
    {Algo::kAuto, "auto", "the cheapest algorithm by the cost model, per message size",
     nullptr, nullptr, 0, false, Algo::kAuto},
    {Algo::kRing, "ring", "pipelined ring (reduce-scatter, allgather), skip-ahead off",
     cost_ring, make_ring, 3, false, Algo::kSkipRing},
    {Algo::kSkipRing, "skipring", "the ring with skip-ahead past late ranks (SKIPRING_SKIP)",
     cost_ring, make_ring, 0, true, Algo::kSkipRing},
    {Algo::kRd, "rd", "recursive doubling: log2 n exchanges of the whole message",
     cost_rd, make_rd, 1, false, Algo::kRd},
    {Algo::kRabenseifner, "rabenseifner",
     "recursive-halving reduce-scatter, recursive-doubling allgather",
     cost_rabenseifner, make_rabenseifner, 2, false, Algo::kRabenseifner},
    {Algo::kTree, "tree", "pipelined reduce then broadcast over one spanning tree",
     cost_tree, make_tree, 4, false, Algo::kTree},
    {Algo::kMultiTree, "multitree",
     "pipelined trees over up to SKIPRING_MULTITREE_K spanning trees sharing the data",
     cost_multitree, make_multitree, 5, false, Algo::kMultiTree},
    {Algo::kHier, "hier",
     "per-host reduce-scatter, the ring (skip-ahead) between hosts, per-host allgather",
     cost_hier, make_hier, 6, true, Algo::kHier},
    {Algo::kMpi, "mpi",
     "the MPI library's own all-reduce (small sizes where it is measured faster), no skip-ahead",
     cost_mpi, make_rd, 7, false, Algo::kMpi},
};
// clang-format on

constexpr bool rows_in_id_order() {
  for (int i = 0; i < kAlgoCount; ++i) {
    if (static_cast<int>(kRows[i].id) != i) return false;
  }
  return true;
}
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kAlgoCount, "one row per Algo id");
static_assert(rows_in_id_order(), "kRows[i] is the row of Algo(i)");

}  // namespace

const std::vector<AlgoRow>& algo_table() {
  static const std::vector<AlgoRow> kTable(std::begin(kRows), std::end(kRows));
  return kTable;
}

const AlgoRow& algo_row(Algo a) { return kRows[static_cast<int>(a)]; }

const char* algo_name(Algo a) { return algo_row(a).name; }

bool parse_algo(const std::string& text, Algo* out) {
  std::string t = text;
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const AlgoRow& r : kRows) {
    if (t == r.name) {
      *out = r.id;
      return true;
    }
  }
  return false;
}

std::string algo_names(const char* sep) {
  std::string out;
  for (const AlgoRow& r : kRows) {
    if (!out.empty()) out += sep;
    out += r.name;
  }
  return out;
}

}  // namespace skipring
