// Multi-spanning-tree planner for all-reduce on a heterogeneous network (seed 002).
//
// The network is a link graph: nodes are ranks 0..n-1, undirected links carry a latency and a
// bandwidth. The planner packs spanning trees into the graph greedily (step 1): each tree
// grows from a root by the link of widest residual bandwidth among those that join a new node,
// have residual >= min_rate and keep the tree's height (latency-weighted distance from the
// root) <= H (ties: nearer the root, then the lower link index; every root, or max_roots of
// them, is tried and the widest bottleneck wins); the tree reserves `reserve` (at most its
// bottleneck residual) on every link it uses, so no link is ever over-allocated, and trees are
// packed until none fits. Step 2 binary-searches the lowest H whose throughput (the summed rates of
// the kept trees) stays
// >= (1 - loss) x the throughput without a height bound. Step 3 keeps at most K trees (the
// fastest) and gives each the fraction of the data proportional to its rate, so all trees
// finish together. See docs/multitree.md.
//
// Link-graph text format (one item per line, '#' starts a comment):
//   nodes N
//   u v latency_us gbps        one undirected link, 0 <= u, v < N, u != v, no duplicates
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace skipring {

struct Link {
  int u = 0;
  int v = 0;
  double latency_s = 0;
  double bandwidth_Bps = 0;  // bytes per second, each direction (full duplex)
};

class LinkGraph {
 public:
  explicit LinkGraph(int nodes = 0) : n_(nodes) {}
  int nodes() const { return n_; }
  const std::vector<Link>& links() const { return links_; }
  // Adds an undirected link; kErrArg (with *why) for bad endpoints, a self-loop, a duplicate,
  // latency < 0 or bandwidth <= 0.
  Status add_link(int u, int v, double latency_s, double bandwidth_Bps, std::string* why);
  // Index of the link between u and v, -1 when none.
  int find(int u, int v) const;
  bool connected() const;
  // Parses / writes the text format above (latency in microseconds, bandwidth in Gbit/s).
  static Status parse(const std::string& text, LinkGraph* out, std::string* why);
  static Status load(const std::string& path, LinkGraph* out, std::string* why);
  std::string to_text() const;

 private:
  int n_;
  std::vector<Link> links_;
};

struct SpanningTree {
  int root = 0;
  std::vector<int> parent;  // parent[v]; -1 for the root
  double rate_Bps = 0;      // bandwidth reserved for this tree on each of its links
  double height_s = 0;      // largest latency-weighted distance from the root
};

struct MultiTreePlan {
  std::vector<SpanningTree> trees;
  std::vector<double> fractions;  // of the data, per tree; sum to 1
  double height_bound_s = 0;      // the H the trees were built under
  double throughput_Bps = 0;      // summed rates of the trees
};

struct PlannerParams {
  int max_trees = 4;        // K: trees kept (>= 1)
  double min_rate_Bps = 0;  // r: links below this residual are unusable; 0: 1% of the widest
  double reserve_Bps = 0;   // b: most a tree reserves per link; 0: its bottleneck residual
  double max_height_s = 0;  // upper bound on H; 0: none
  double loss = 0.05;       // step 2: accepted throughput loss for a lower H, in [0, 1)
  int search_steps = 16;    // step 2: bisection steps
  int max_candidates = 64;  // step 1: most trees packed before step 3
  int max_roots = 16;       // step 1: roots tried per tree, spread over 0..n-1; 0: all
};

// Children of `node` in `t`, ascending.
std::vector<int> tree_children(const SpanningTree& t, int node);
// Hop count of the deepest node.
int tree_depth(const SpanningTree& t);

// Checks that every tree spans 0..n-1 (one root, parents in range, no cycle) and the fractions
// are >= 0, finite and sum to 1 (within 1e-9), one per tree.
Status validate_plan(const MultiTreePlan& plan, int n, std::string* why);

// Step 1 only: packs trees of height <= height_s (residual bandwidth reserved per tree).
// Returned in packing order; identical trees are merged (rates added).
std::vector<SpanningTree> pack_trees(const LinkGraph& g, const PlannerParams& p, double height_s);

// Steps 1-3. kErrArg (with *why) for an empty or disconnected graph, K < 1, bad parameters, or
// when no spanning tree fits (min_rate or max_height too strict).
Status plan_multitree(const LinkGraph& g, const PlannerParams& p, MultiTreePlan* out,
                      std::string* why);

// The plan's throughput once every rank's own link and every host's link are counted as the
// shared resources they are (the planner's graph treats links as independent, which a switched
// network or shared memory is not): per byte of data, a rank receives from its children and
// sends to its parent in each tree (weighted by the tree's fraction), and a host's link carries
// the tree edges that cross it. rank_Bps: a rank's injection bandwidth; host_Bps: a host's
// link (0: not limiting); host_of_rank may be empty (one host).
double effective_tree_rate(const MultiTreePlan& plan, const std::vector<int>& host_of_rank,
                           double rank_Bps, double host_Bps);

// One line per tree: root, rate, height, parent array.
std::string plan_to_string(const MultiTreePlan& plan);

}  // namespace skipring
