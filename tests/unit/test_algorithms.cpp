// The algorithm table (collectives/algorithms.h): one row per id, unique names that parse back,
// factories that build working cores, and auto's choice over a grid of communicators, message
// sizes and cost parameters against the choices the code made before the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/collective_core.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "runtime/config.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"
#include "topology/multitree.h"

namespace skipring {
namespace {

TEST(AlgoTable, EveryIdHasExactlyOneRow) {
  const std::vector<AlgoRow>& table = algo_table();
  ASSERT_EQ(static_cast<int>(table.size()), kAlgoCount);
  std::vector<int> rows_of(kAlgoCount, 0);
  for (size_t i = 0; i < table.size(); ++i) {
    const int id = static_cast<int>(table[i].id);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, kAlgoCount);
    ++rows_of[id];
    EXPECT_EQ(id, static_cast<int>(i)) << "rows in id order";
    EXPECT_EQ(&algo_row(table[i].id), &algo_row(static_cast<Algo>(i)));
  }
  for (int id = 0; id < kAlgoCount; ++id) EXPECT_EQ(rows_of[id], 1) << "Algo " << id;
}

TEST(AlgoTable, NamesAreUniqueAndRoundTrip) {
  std::set<std::string> names;
  for (const AlgoRow& r : algo_table()) {
    ASSERT_NE(r.name, nullptr);
    EXPECT_TRUE(names.insert(r.name).second) << "duplicate name " << r.name;
    EXPECT_STREQ(algo_name(r.id), r.name);
    Algo back = Algo::kAuto;
    ASSERT_TRUE(parse_algo(r.name, &back)) << r.name;
    EXPECT_EQ(back, r.id) << r.name;
    std::string upper = r.name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    ASSERT_TRUE(parse_algo(upper, &back)) << upper;
    EXPECT_EQ(back, r.id) << upper;
    ASSERT_NE(r.description, nullptr);
    EXPECT_GT(std::strlen(r.description), 10u) << r.name;
    EXPECT_EQ(std::strchr(r.description, '\n'), nullptr) << "one line: " << r.name;
  }
  Algo x = Algo::kRing;
  EXPECT_FALSE(parse_algo("", &x));
  EXPECT_FALSE(parse_algo("ringg", &x));
  EXPECT_EQ(x, Algo::kRing);
}

TEST(AlgoTable, RowsAreComplete) {
  for (const AlgoRow& r : algo_table()) {
    if (r.id == Algo::kAuto) {
      EXPECT_EQ(r.cost, nullptr);
      EXPECT_EQ(r.make, nullptr);
      EXPECT_EQ(r.select_order, 0);
      continue;
    }
    EXPECT_NE(r.cost, nullptr) << r.name;
    EXPECT_NE(r.make, nullptr) << r.name;
    EXPECT_NE(r.with_skip, Algo::kAuto) << r.name;
    EXPECT_EQ(algo_row(r.with_skip).with_skip, r.with_skip) << r.name;
  }
  // The order auto compares in (ties keep the earlier): as before the table.
  const std::vector<Algo> expected = {Algo::kRd,   Algo::kRabenseifner, Algo::kRing,
                                      Algo::kTree, Algo::kMultiTree,    Algo::kHier,
                                      Algo::kMpi};
  EXPECT_EQ(modelled_algos(), expected);
  std::set<int> orders;
  for (Algo a : modelled_algos()) EXPECT_TRUE(orders.insert(algo_row(a).select_order).second);
}

TEST(AlgoTable, ParserTextAndErrorListTheTable) {
  // What SKIPRING_ALGO accepts (README, skipring_info, the error text) is the table's names.
  EXPECT_EQ(algo_names(), "auto, ring, skipring, rd, rabenseifner, tree, multitree, hier, mpi");
  Config c;
  std::string error;
  const auto env = [](const char* name, std::string* value) {
    if (std::string(name) != "SKIPRING_ALGO") return false;
    *value = "nosuch";
    return true;
  };
  EXPECT_EQ(load_config(env, &c, &error), Status::kErrConfig);
  EXPECT_NE(error.find(algo_names()), std::string::npos) << error;
}

TEST(AlgoTable, FactoriesBuildCoresThatAllReduce) {
  // Every row's factory, run on 4 ranks on 2 hosts in the harness: int32 sums are exact.
  const std::vector<int> host_of = {0, 0, 1, 1};
  LinkGraph g(4);
  std::string why;
  for (int u = 0; u < 4; ++u) {
    for (int v = u + 1; v < 4; ++v) {
      ASSERT_EQ(g.add_link(u, v, 1e-6, host_of[u] == host_of[v] ? 10e9 : 1e9, &why), Status::kOk);
    }
  }
  std::map<int, MultiTreePlan> plans;
  for (int k : {1, 2}) {
    PlannerParams pp;
    pp.max_trees = k;
    ASSERT_EQ(plan_multitree(g, pp, &plans[k], &why), Status::kOk) << why;
  }
  int built = 0;
  for (const AlgoRow& r : algo_table()) {
    if (r.make == nullptr) continue;
    harness::Options o;
    o.n = 4;
    o.count = 1000;
    o.segment_bytes = 256;
    o.collectives = 2;
    o.tag_span = 1 << 20;
    o.skip = r.skip_ahead;
    std::vector<int> requested;  // tree plans asked for
    o.make_core = [&](const RingParams& p, std::vector<uint8_t>* scratch) {
      AlgoContext ctx;
      ctx.params = &p;
      ctx.scratch = scratch;
      ctx.host_of_rank = &host_of;
      ctx.multitree_k = 2;
      ctx.tree_plan = [&](int k, const MultiTreePlan** out) {
        requested.push_back(k);
        *out = &plans.at(k);
        return Status::kOk;
      };
      std::unique_ptr<CollectiveCore> core;
      EXPECT_EQ(r.make(ctx, &core), Status::kOk) << r.name;
      return core;
    };
    const testdata::Buffers in = testdata::make_inputs(o, 7);
    const harness::Result res = harness::run(o, in);
    ASSERT_EQ(res.status, Status::kOk) << r.name << ": " << res.error;
    for (int c = 0; c < o.collectives; ++c) {
      for (size_t i = 0; i < o.count; ++i) {
        uint32_t sum = 0;  // wrapping, like the kernel's int32 sum
        for (int q = 0; q < o.n; ++q) {
          uint32_t v;
          std::memcpy(&v, in[c][q].data() + i * sizeof v, sizeof v);
          sum += v;
        }
        for (int q = 0; q < o.n; ++q) {
          uint32_t v;
          std::memcpy(&v, res.outputs[c][q].data() + i * sizeof v, sizeof v);
          ASSERT_EQ(v, sum) << r.name << " collective " << c << " rank " << q << " element " << i;
        }
      }
    }
    if (r.id == Algo::kTree || r.id == Algo::kMultiTree) {
      ASSERT_FALSE(requested.empty()) << r.name;
      EXPECT_EQ(requested.front(), r.id == Algo::kTree ? 1 : 2) << r.name;
    }
    ++built;
  }
  EXPECT_EQ(built, kAlgoCount - 1);  // every row but auto
}

struct GridTopo {
  const char* label;
  int n;
  std::vector<int> per_host;  // empty: one host
  bool overlap;
  int trees;  // 0: no tree plan; 1: a 2-tree plan and a single tree; 2: a fast single tree only
};

struct GridParams {
  const char* label;
  CostParams p;
  size_t segment_bytes;
  bool skip;
};

std::vector<GridTopo> grid_topologies() {
  return {
      {"flat2", 2, {}, true, 0},
      {"flat3", 3, {}, true, 0},
      {"flat4", 4, {}, true, 0},
      {"flat5", 5, {}, true, 0},
      {"flat7", 7, {}, true, 0},
      {"flat8", 8, {}, true, 0},
      {"flat8-over", 8, {}, false, 0},
      {"flat16", 16, {}, true, 0},
      {"flat64", 64, {}, true, 0},
      {"flat8-trees", 8, {}, true, 1},
      {"2x2", 4, {2, 2}, true, 0},
      {"2x4", 8, {4, 4}, true, 0},
      {"2x4-trees", 8, {4, 4}, true, 1},
      {"4x4", 16, {4, 4, 4, 4}, true, 0},
      {"4x4-over", 16, {4, 4, 4, 4}, false, 1},
      {"8x8", 64, {8, 8, 8, 8, 8, 8, 8, 8}, true, 1},
      {"3h-4-4-2", 10, {4, 4, 2}, true, 0},
      {"16x1", 16, std::vector<int>(16, 1), true, 1},
      {"2x4-fasttree", 8, {4, 4}, true, 2},
      {"flat16-fasttree", 16, {}, true, 2},
  };
}

std::vector<GridParams> grid_params() {
  std::vector<GridParams> out;
  CostParams def;
  out.push_back({"default", def, 256 * 1024, false});
  out.push_back({"default-skip", def, 256 * 1024, true});
  out.push_back({"default-seg64k-skip", def, 64 * 1024, true});
  CostParams slow;  // slow links between hosts, memory-bound out of cache
  slow.inter_alpha_s = 20e-6;
  slow.inter_beta_s = 1.0 / 1.25e9;
  slow.sigma_s = 1.5e-6;
  slow.mem_slowdown = 1.5;
  out.push_back({"slow-inter", slow, 256 * 1024, false});
  CostParams shm;  // shared-memory-like: cheap messages, slow reduction, small cache
  shm.alpha_s = shm.inter_alpha_s = 0.5e-6;
  shm.beta_s = shm.inter_beta_s = 1.0 / 10e9;
  shm.gamma_s = 1.0 / 5e9;
  shm.sigma_s = 0.3e-6;
  shm.cache_bytes = 1024 * 1024;
  shm.mem_slowdown = 2.0;
  out.push_back({"shm", shm, 256 * 1024, true});
  return out;
}

std::vector<size_t> grid_sizes() {
  std::vector<size_t> s;
  for (size_t b = 8; b <= (size_t{256} << 20); b *= 4) s.push_back(b);
  s.push_back(1000);
  s.push_back((size_t{3} << 20) + 7);
  return s;
}

TopologySummary summary(const GridTopo& g) {
  TopologySummary t;
  t.n = g.n;
  t.overlap = g.overlap;
  if (!g.per_host.empty()) {
    t.hosts = static_cast<int>(g.per_host.size());
    t.ranks_per_host = g.per_host;
    t.max_local = 1;
    for (int m : g.per_host) t.max_local = std::max(t.max_local, m);
  } else {
    t.max_local = g.n;
  }
  if (g.trees == 2) {
    t.trees = 1;
    t.tree_height = t.tree1_height = 2;
    t.tree_rate_Bps = t.tree1_rate_Bps = 40e9;
  } else if (g.trees == 1) {
    t.trees = 2;
    t.tree_height = 3;
    t.tree_rate_Bps = 2.5e9;
    t.tree1_height = 4;
    t.tree1_rate_Bps = 1.2e9;
  }
  return t;
}

// One line per (topology, parameters): auto's choice for every grid size.
std::vector<std::string> selection_grid() {
  std::vector<std::string> lines;
  for (const GridTopo& g : grid_topologies()) {
    for (const GridParams& gp : grid_params()) {
      std::string line = std::string(g.label) + " " + gp.label + ":";
      for (size_t b : grid_sizes()) {
        line += " ";
        line += algo_name(select_algo(b, summary(g), gp.p, gp.segment_bytes, gp.skip));
      }
      lines.push_back(line);
    }
  }
  return lines;
}

// (The `mpi` row is in the grid too: its cost is +inf until the MPI all-reduce is measured, which
// CostParams' defaults are not, so the choices stay the same.)
// Recorded from main at 7dd7c70, before the algorithm table existed (select.cpp's switch over
// Algo and its hand-written modelled_algos list), by this test's first commit run with
// SR_PRINT_SELECTION_GRID=1: the table must pick exactly the same algorithm everywhere. Sizes
// per line: 8 B .. 256 MiB by x4, then 1000 B and 3 MiB + 7.
// Regenerate only for an intended change of the cost model: SR_PRINT_SELECTION_GRID=1 prints it.
const char* const kExpectedGrid[] = {
    "flat2 default: rd rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring rd ring",
    "flat2 default-skip: rd rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring "
    "skipring rd skipring",
    "flat2 default-seg64k-skip: rd rd rd rd rd rd rd rabenseifner skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat2 slow-inter: rd rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring rd ring",
    "flat2 shm: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring skipring "
    "skipring skipring rd skipring",
    "flat3 default: rd rd rd rd rd rd ring ring ring ring ring ring ring rd ring",
    "flat3 default-skip: rd rd rd rd rd rd skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat3 default-seg64k-skip: rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat3 slow-inter: rd rd rd rd rd rd ring ring ring ring ring ring ring rd ring",
    "flat3 shm: rd rd rd rd rd skipring skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat4 default: rd rd rd rd rd rd rd ring ring ring ring ring ring rd ring",
    "flat4 default-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat4 default-seg64k-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat4 slow-inter: rd rd rd rd rd rd rd rabenseifner ring ring ring ring ring rd ring",
    "flat4 shm: rd rd rd rd rd rabenseifner skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat5 default: rd rd rd rd rd rd ring ring ring ring ring ring ring rd ring",
    "flat5 default-skip: rd rd rd rd rd rd skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat5 default-seg64k-skip: rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat5 slow-inter: rd rd rd rd rd rd ring ring ring ring ring ring ring rd ring",
    "flat5 shm: rd rd rd rd rd skipring skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat7 default: rd rd rd rd rd rd rd ring ring ring ring ring ring rd ring",
    "flat7 default-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat7 default-seg64k-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "flat7 slow-inter: rd rd rd rd rd rd rd ring ring ring ring ring ring rd ring",
    "flat7 shm: rd rd rd rd rd rd skipring skipring skipring skipring skipring skipring skipring "
    "rd skipring",
    "flat8 default: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring rd ring",
    "flat8 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat8 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring "
    "skipring skipring skipring rd skipring",
    "flat8 slow-inter: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring rd "
    "ring",
    "flat8 shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat8-over default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "flat8-over default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "flat8-over default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "flat8-over slow-inter: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "ring ring ring rd rabenseifner",
    "flat8-over shm: rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "rabenseifner skipring skipring skipring rd skipring",
    "flat16 default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner ring ring ring ring "
    "rd ring",
    "flat16 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring "
    "skipring skipring skipring rd skipring",
    "flat16 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring "
    "skipring skipring skipring rd skipring",
    "flat16 slow-inter: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner ring ring ring "
    "ring rd ring",
    "flat16 shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat64 default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner ring "
    "ring ring rd rabenseifner",
    "flat64 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "skipring skipring skipring rd rabenseifner",
    "flat64 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner "
    "rabenseifner skipring skipring skipring rd rabenseifner",
    "flat64 slow-inter: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner ring "
    "ring ring rd rabenseifner",
    "flat64 shm: rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring rd skipring",
    "flat8-trees default: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring rd "
    "ring",
    "flat8-trees default-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring "
    "skipring skipring skipring rd skipring",
    "flat8-trees default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring "
    "skipring skipring skipring skipring rd skipring",
    "flat8-trees slow-inter: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring "
    "rd ring",
    "flat8-trees shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "2x2 default: rd rd rd rd rd rd rd ring ring ring ring ring ring rd ring",
    "2x2 default-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring skipring "
    "rd skipring",
    "2x2 default-seg64k-skip: rd rd rd rd rd rd rd skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "2x2 slow-inter: rd rd rd rd rd rd hier hier hier hier hier hier hier rd hier",
    "2x2 shm: rd rd rd rd rd rabenseifner skipring skipring skipring skipring skipring skipring "
    "skipring rd skipring",
    "2x4 default: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring rd ring",
    "2x4 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring rd skipring",
    "2x4 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring "
    "skipring skipring skipring rd skipring",
    "2x4 slow-inter: rd rd rd rd rd hier hier hier hier hier hier hier hier rd hier",
    "2x4 shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "2x4-trees default: rd rd rd rd rd rd rabenseifner rabenseifner ring ring ring ring ring rd "
    "ring",
    "2x4-trees default-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring "
    "skipring skipring skipring rd skipring",
    "2x4-trees default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner skipring skipring "
    "skipring skipring skipring rd skipring",
    "2x4-trees slow-inter: rd rd rd rd rd hier hier hier hier hier multitree multitree multitree "
    "rd hier",
    "2x4-trees shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "4x4 default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner ring ring ring ring rd "
    "ring",
    "4x4 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring skipring "
    "skipring skipring rd skipring",
    "4x4 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring "
    "skipring skipring skipring rd skipring",
    "4x4 slow-inter: rd rd rd rd rd rd rd hier hier hier hier hier ring rd hier",
    "4x4 shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "4x4-over default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "4x4-over default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "4x4-over default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner "
    "rabenseifner rabenseifner rabenseifner rabenseifner rd rabenseifner",
    "4x4-over slow-inter: rd rd rd rd rd rd rd hier hier multitree multitree multitree multitree "
    "rd multitree",
    "4x4-over shm: rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner rabenseifner "
    "skipring skipring skipring rd skipring",
    "8x8 default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner ring ring "
    "ring rd rabenseifner",
    "8x8 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner rabenseifner "
    "skipring skipring skipring rd rabenseifner",
    "8x8 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner "
    "rabenseifner skipring skipring skipring rd rabenseifner",
    "8x8 slow-inter: rd rd rd rd rd multitree multitree rabenseifner rabenseifner multitree "
    "multitree multitree multitree rd multitree",
    "8x8 shm: rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring rd skipring",
    "3h-4-4-2 default: rd rd rd rd rd rd rabenseifner ring ring ring ring ring ring rd ring",
    "3h-4-4-2 default-skip: rd rd rd rd rd rd rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "3h-4-4-2 default-seg64k-skip: rd rd rd rd rd rd rabenseifner skipring skipring skipring "
    "skipring skipring skipring rd skipring",
    "3h-4-4-2 slow-inter: rd rd rd rd rd hier hier hier hier ring ring ring ring rd ring",
    "3h-4-4-2 shm: rd rd rd rd rd rabenseifner skipring skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "16x1 default: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner ring ring ring ring rd "
    "ring",
    "16x1 default-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring skipring "
    "skipring skipring rd skipring",
    "16x1 default-seg64k-skip: rd rd rd rd rd rd rabenseifner rabenseifner rabenseifner skipring "
    "skipring skipring skipring rd skipring",
    "16x1 slow-inter: rd rd rd rd rd rd rd rabenseifner rabenseifner multitree multitree multitree "
    "multitree rd multitree",
    "16x1 shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring skipring "
    "skipring skipring rd skipring",
    "2x4-fasttree default: rd rd rd rd rd rd tree rabenseifner tree tree tree tree tree rd tree",
    "2x4-fasttree default-skip: rd rd rd rd rd rd tree rabenseifner tree tree tree tree tree rd "
    "tree",
    "2x4-fasttree default-seg64k-skip: rd rd rd rd rd rd tree tree tree tree tree tree tree rd "
    "tree",
    "2x4-fasttree slow-inter: rd rd rd rd rd hier hier tree tree tree tree tree tree rd tree",
    "2x4-fasttree shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring skipring rd skipring",
    "flat16-fasttree default: rd rd rd rd rd tree tree tree tree tree tree tree tree rd tree",
    "flat16-fasttree default-skip: rd rd rd rd rd tree tree tree tree tree tree tree tree rd tree",
    "flat16-fasttree default-seg64k-skip: rd rd rd rd rd tree tree tree tree tree tree tree tree "
    "rd tree",
    "flat16-fasttree slow-inter: rd rd rd rd rd rd tree tree tree tree tree tree tree rd tree",
    "flat16-fasttree shm: rd rd rd rd rd rabenseifner rabenseifner skipring skipring skipring "
    "skipring skipring skipring rd skipring",
};

TEST(AlgoSelection, SameChoicesAsBeforeTheTable) {
  const std::vector<std::string> got = selection_grid();
  if (std::getenv("SR_PRINT_SELECTION_GRID") != nullptr) {
    for (const std::string& l : got) std::printf("    \"%s\",\n", l.c_str());
  }
  const size_t expected = sizeof(kExpectedGrid) / sizeof(kExpectedGrid[0]);
  ASSERT_EQ(got.size(), expected);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], kExpectedGrid[i]);
}

// The `mpi` row (issue 40): MPI's measured offset against the direct recursive doubling, linear
// between the probe sizes, nothing above the largest.
TEST(AlgoSelection, MpiCostFollowsTheMeasuredOffsets) {
  CostParams p;
  TopologySummary t;
  t.n = 4;
  t.max_local = 4;
  for (size_t b : {size_t{8}, size_t{1000}, size_t{1} << 20}) {
    EXPECT_TRUE(std::isinf(algo_cost(Algo::kMpi, b, t, p, 256 * 1024))) << "not measured: " << b;
  }
  // At 8, 128, 1024, 2048, 4096, 8192 and 65536 bytes.
  const double offsets[CostParams::kMpiProbes] = {-0.2e-6, -0.1e-6, 0.0, 0.2e-6,
                                                  0.4e-6,  1e-6,    3e-6};
  std::copy(std::begin(offsets), std::end(offsets), std::begin(p.mpi_offset_s));
  const auto rd = [&](size_t b) { return algo_cost(Algo::kRd, b, t, p, 256 * 1024); };
  const auto mpi = [&](size_t b) { return algo_cost(Algo::kMpi, b, t, p, 256 * 1024); };
  // rd's time less kMpiTieShare of it (ties go to MPI), plus the offset.
  const auto base = [&](size_t b) { return rd(b) * (1 - kMpiTieShare); };
  EXPECT_DOUBLE_EQ(mpi(1), base(1) - 0.2e-6);
  EXPECT_DOUBLE_EQ(mpi(8), base(8) - 0.2e-6);
  EXPECT_DOUBLE_EQ(mpi(128), base(128) - 0.1e-6);
  // Half way between 1024 (0) and 2048 (0.2 us), and between 4096 (0.4 us) and 8192 (1 us).
  EXPECT_NEAR(mpi(1536) - base(1536), 0.1e-6, 1e-12);
  EXPECT_NEAR(mpi(6144) - base(6144), 0.7e-6, 1e-12);
  EXPECT_DOUBLE_EQ(mpi(65536), base(65536) + 3e-6);
  EXPECT_TRUE(std::isinf(mpi(65537)));
  EXPECT_EQ(algo_cost(Algo::kMpi, 8, TopologySummary{}, p, 256 * 1024), 0.0) << "one rank";
}

TEST(AlgoSelection, AutoPicksMpiWhereMeasuredFaster) {
  TopologySummary t;
  t.n = 2;
  t.max_local = 2;
  CostParams p;
  // MPI 0.2 us faster than the direct rd up to 128 B, slower from 1 KiB.
  const double offsets[CostParams::kMpiProbes] = {-0.2e-6, -0.2e-6, 0.5e-6, 1e-6,
                                                  1.5e-6,  2e-6,    8e-6};
  std::copy(std::begin(offsets), std::end(offsets), std::begin(p.mpi_offset_s));
  for (bool skip : {false, true}) {
    EXPECT_EQ(select_algo(8, t, p, 256 * 1024, skip), Algo::kMpi);
    EXPECT_EQ(select_algo(128, t, p, 256 * 1024, skip), Algo::kMpi);
    EXPECT_EQ(select_algo(1024, t, p, 256 * 1024, skip), Algo::kRd);
    // Large sizes keep skipring's algorithms (and skip-ahead).
    const Algo big = select_algo(size_t{64} << 20, t, p, 256 * 1024, skip);
    EXPECT_NE(big, Algo::kMpi);
    EXPECT_EQ(algo_row(big).skip_ahead, skip);
  }
  // Once stragglers were seen, the skip-ahead preference still applies to what mpi displaced
  // only where its modelled time is within the factor (at 8 B the ring is far off: mpi stays).
  EXPECT_EQ(select_algo_stragglers(8, t, p, 256 * 1024, true, true, 1.5), Algo::kMpi);
  // Measured slower than rd by more than the tie share everywhere: never picked.
  for (size_t i = 0; i < CostParams::kMpiProbes; ++i) {
    p.mpi_offset_s[i] =
        2 * kMpiTieShare * algo_cost(Algo::kRd, kMpiProbeBytes[i], t, p, 256 * 1024);
  }
  for (size_t b = 8; b <= (size_t{1} << 26); b *= 4) {
    EXPECT_NE(select_algo(b, t, p, 256 * 1024, true), Algo::kMpi) << b;
  }
}

// Ties go to the MPI library: measured slower than the direct rd by less than kMpiTieShare of rd's
// time (within the probe's run-to-run spread), `mpi` is still picked; by more, rd is.
TEST(AlgoSelection, TiesGoToMpi) {
  TopologySummary t;
  t.n = 4;
  t.max_local = 4;
  CostParams p;
  const auto rd = [&](size_t b) { return algo_cost(Algo::kRd, b, t, p, 256 * 1024); };
  for (size_t i = 0; i < CostParams::kMpiProbes; ++i) {
    p.mpi_offset_s[i] = 0.5 * kMpiTieShare * rd(kMpiProbeBytes[i]);
  }
  EXPECT_EQ(select_algo(8, t, p, 256 * 1024, true), Algo::kMpi);
  EXPECT_EQ(select_algo(128, t, p, 256 * 1024, true), Algo::kMpi);
  for (size_t i = 0; i < CostParams::kMpiProbes; ++i) {
    p.mpi_offset_s[i] = 1.5 * kMpiTieShare * rd(kMpiProbeBytes[i]);
  }
  EXPECT_EQ(select_algo(8, t, p, 256 * 1024, true), Algo::kRd);
  EXPECT_EQ(select_algo(128, t, p, 256 * 1024, true), Algo::kRd);
}

}  // namespace
}  // namespace skipring
