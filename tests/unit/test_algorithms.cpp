// The algorithm table (collectives/algorithms.h): auto's choice over a grid of communicators,
// message sizes and cost parameters, against the choices the code made before the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/select.h"

namespace skipring {
namespace {

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

}  // namespace
}  // namespace skipring
