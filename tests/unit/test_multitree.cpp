// Multi-spanning-tree planner (topology/multitree.h) and the tree all-reduce core
// (collectives/tree_allreduce.h). Planner: on synthetic heterogeneous graphs every tree spans
// all nodes, respects the height bound, no link is over-allocated, fractions sum to 1, plans
// are deterministic, bad input is an error. Core: under the in-process harness (n = 2..16,
// random trees and planned trees, 1..4 trees, every op x type, in place, back-to-back, random
// delivery, eager and rendezvous) every rank ends with exactly the bits of the sequential
// reference of the same reduction trees, and no message is left over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "collectives/reduce_kernels.h"
#include "collectives/tree_allreduce.h"
#include "collectives/wire_header.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"
#include "topology/multitree.h"

namespace skipring {
namespace {

constexpr double kGBps = 1e9;

LinkGraph complete_graph(int n, double bw, double lat = 1e-6) {
  LinkGraph g(n);
  std::string why;
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) EXPECT_EQ(g.add_link(u, v, lat, bw, &why), Status::kOk);
  }
  return g;
}

// A connected random graph: a random spanning tree plus extra links; bandwidths 1..100 GB/s
// (a few fat links), latencies 1..20 us.
LinkGraph random_graph(int n, std::mt19937_64& rng, double extra_prob) {
  LinkGraph g(n);
  std::string why;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  auto bw = [&] { return (rng() % 8 == 0 ? 100.0 : 1.0 + rng() % 20) * kGBps; };
  auto lat = [&] { return 1e-6 * (1 + rng() % 20); };
  for (int i = 1; i < n; ++i) {
    EXPECT_EQ(g.add_link(order[i], order[rng() % i], lat(), bw(), &why), Status::kOk);
  }
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (g.find(u, v) < 0 && std::uniform_real_distribution<double>(0, 1)(rng) < extra_prob) {
        EXPECT_EQ(g.add_link(u, v, lat(), bw(), &why), Status::kOk);
      }
    }
  }
  return g;
}

// Latency-weighted height of a tree over the graph's links (-1 if a tree edge is no link).
double tree_height(const LinkGraph& g, const SpanningTree& t) {
  double h = 0;
  for (int v = 0; v < g.nodes(); ++v) {
    double d = 0;
    for (int x = v; x != t.root; x = t.parent[x]) {
      const int e = g.find(x, t.parent[x]);
      if (e < 0) return -1;
      d += g.links()[e].latency_s;
    }
    h = std::max(h, d);
  }
  return h;
}

void check_plan(const LinkGraph& g, const PlannerParams& pp, const MultiTreePlan& plan) {
  std::string why;
  ASSERT_EQ(validate_plan(plan, g.nodes(), &why), Status::kOk) << why;
  ASSERT_LE(static_cast<int>(plan.trees.size()), pp.max_trees);
  double sum = 0;
  std::vector<double> used(g.links().size(), 0);
  for (size_t i = 0; i < plan.trees.size(); ++i) {
    const SpanningTree& t = plan.trees[i];
    const double h = tree_height(g, t);
    ASSERT_GE(h, 0) << "tree " << i << " uses a pair that is no link";
    EXPECT_LE(h, plan.height_bound_s * (1 + 1e-9) + 1e-15) << "tree " << i;
    EXPECT_NEAR(h, t.height_s, 1e-12);
    EXPECT_GT(t.rate_Bps, 0);
    for (int v = 0; v < g.nodes(); ++v) {
      if (v != t.root) used[g.find(v, t.parent[v])] += t.rate_Bps;
    }
    sum += plan.fractions[i];
    EXPECT_NEAR(plan.fractions[i], t.rate_Bps / plan.throughput_Bps, 1e-12);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  for (size_t e = 0; e < used.size(); ++e) {
    EXPECT_LE(used[e], g.links()[e].bandwidth_Bps * (1 + 1e-9))
        << "link " << e << " over-allocated";
  }
}

// ---------------------------------------------------------------------------------------
// Planner

TEST(MultiTreePlanner, ParseAndWriteGraphFile) {
  LinkGraph g;
  std::string why;
  ASSERT_EQ(LinkGraph::parse("# test\nnodes 3\n0 1 5 100  # fat\n1 2 2.5 10\n\n", &g, &why),
            Status::kOk)
      << why;
  ASSERT_EQ(g.nodes(), 3);
  ASSERT_EQ(g.links().size(), 2u);
  EXPECT_DOUBLE_EQ(g.links()[0].latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(g.links()[0].bandwidth_Bps, 12.5e9);
  EXPECT_DOUBLE_EQ(g.links()[1].bandwidth_Bps, 1.25e9);
  LinkGraph back;
  ASSERT_EQ(LinkGraph::parse(g.to_text(), &back, &why), Status::kOk) << why;
  EXPECT_EQ(back.to_text(), g.to_text());
  for (const char* bad :
       {"0 1 5 100\n", "nodes 2\n0 1 5\n", "nodes 2\n0 2 1 1\n", "nodes 2\n0 0 1 1\n",
        "nodes 2\n0 1 1 1\n1 0 1 1\n", "nodes 2\n0 1 1 0\n", "nodes 2\n0 1 -1 1\n", "nodes 0\n", "",
        "nodes 2\nnodes 2\n", "nodes 2\n0 1 1 1 7\n"}) {
    EXPECT_EQ(LinkGraph::parse(bad, &g, &why), Status::kErrArg) << bad;
    EXPECT_FALSE(why.empty());
  }
  EXPECT_EQ(LinkGraph::load("/nonexistent/graph.txt", &g, &why), Status::kErrArg);
}

TEST(MultiTreePlanner, BadInputIsAnError) {
  MultiTreePlan plan;
  std::string why;
  LinkGraph two(4);
  ASSERT_EQ(two.add_link(0, 1, 1e-6, kGBps, &why), Status::kOk);
  ASSERT_EQ(two.add_link(2, 3, 1e-6, kGBps, &why), Status::kOk);
  PlannerParams pp;
  EXPECT_EQ(plan_multitree(two, pp, &plan, &why), Status::kErrArg);
  EXPECT_NE(why.find("connected"), std::string::npos) << why;
  const LinkGraph k4 = complete_graph(4, kGBps);
  pp.max_trees = 0;
  EXPECT_EQ(plan_multitree(k4, pp, &plan, &why), Status::kErrArg);
  pp.max_trees = 2;
  pp.loss = 1.0;
  EXPECT_EQ(plan_multitree(k4, pp, &plan, &why), Status::kErrArg);
  pp.loss = 0.05;
  pp.min_rate_Bps = 2 * kGBps;  // no link is that fast
  EXPECT_EQ(plan_multitree(k4, pp, &plan, &why), Status::kErrArg);
  pp.min_rate_Bps = 0;
  pp.max_height_s = 0.5e-6;  // below every link's latency
  EXPECT_EQ(plan_multitree(k4, pp, &plan, &why), Status::kErrArg);
  EXPECT_EQ(plan_multitree(LinkGraph(0), PlannerParams{}, &plan, &why), Status::kErrArg);
}

TEST(MultiTreePlanner, SingleNodeAndPair) {
  MultiTreePlan plan;
  std::string why;
  PlannerParams pp;
  ASSERT_EQ(plan_multitree(LinkGraph(1), pp, &plan, &why), Status::kOk) << why;
  ASSERT_EQ(plan.trees.size(), 1u);
  EXPECT_EQ(plan.trees[0].parent, std::vector<int>{-1});
  const LinkGraph pair = complete_graph(2, 3 * kGBps);
  ASSERT_EQ(plan_multitree(pair, pp, &plan, &why), Status::kOk) << why;
  ASSERT_EQ(plan.trees.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.throughput_Bps, 3 * kGBps);
  check_plan(pair, pp, plan);
}

TEST(MultiTreePlanner, CompleteGraphPacksSeveralTrees) {
  for (int n : {3, 4, 6, 8}) {
    const LinkGraph g = complete_graph(n, 10 * kGBps);
    PlannerParams pp;
    pp.max_trees = 8;
    pp.reserve_Bps = 5 * kGBps;
    pp.loss = 0.0;
    MultiTreePlan plan;
    std::string why;
    ASSERT_EQ(plan_multitree(g, pp, &plan, &why), Status::kOk) << why;
    check_plan(g, pp, plan);
    // K_n holds floor(n / 2) edge-disjoint spanning trees: more than one tree's worth.
    EXPECT_GT(plan.throughput_Bps, 10 * kGBps * 1.01) << "n=" << n << "\n" << plan_to_string(plan);
  }
}

TEST(MultiTreePlanner, SlowLinkIsAvoided) {
  // A ring of 6 fat links (10 GB/s) plus chords; one ring link is 10x slower.
  LinkGraph g(6);
  std::string why;
  for (int i = 0; i < 6; ++i) {
    const double bw = i == 2 ? 1 * kGBps : 10 * kGBps;
    ASSERT_EQ(g.add_link(i, (i + 1) % 6, 1e-6, bw, &why), Status::kOk);
  }
  PlannerParams pp;
  pp.max_trees = 1;
  MultiTreePlan plan;
  ASSERT_EQ(plan_multitree(g, pp, &plan, &why), Status::kOk) << why;
  check_plan(g, pp, plan);
  ASSERT_EQ(plan.trees.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.trees[0].rate_Bps, 10 * kGBps) << "the path around the slow link";
  const int slow = g.find(2, 3);
  const SpanningTree& t = plan.trees[0];
  for (int v = 0; v < 6; ++v) {
    if (v != t.root) {
      EXPECT_NE(g.find(v, t.parent[v]), slow);
    }
  }
  // With a second tree allowed, the slow link's residual is used too.
  pp.max_trees = 2;
  ASSERT_EQ(plan_multitree(g, pp, &plan, &why), Status::kOk) << why;
  check_plan(g, pp, plan);
}

TEST(MultiTreePlanner, HeightBoundAndBinarySearch) {
  // A fat path 0-1-2-3-4-5 (50 GB/s, 10 us per hop) and a thin star from 0 (5 GB/s, 1 us).
  LinkGraph g(6);
  std::string why;
  for (int i = 0; i + 1 < 6; ++i)
    ASSERT_EQ(g.add_link(i, i + 1, 10e-6, 50 * kGBps, &why), Status::kOk);
  for (int i = 2; i < 6; ++i) ASSERT_EQ(g.add_link(0, i, 1e-6, 5 * kGBps, &why), Status::kOk);
  PlannerParams pp;
  pp.max_trees = 1;
  pp.loss = 0.0;
  MultiTreePlan wide;
  ASSERT_EQ(plan_multitree(g, pp, &wide, &why), Status::kOk) << why;
  check_plan(g, pp, wide);
  EXPECT_DOUBLE_EQ(wide.throughput_Bps, 50 * kGBps) << "no loss allowed: the fat path";
  // Allowing 95% loss, the search settles on a far lower tree.
  pp.loss = 0.95;
  MultiTreePlan low;
  ASSERT_EQ(plan_multitree(g, pp, &low, &why), Status::kOk) << why;
  check_plan(g, pp, low);
  EXPECT_LT(low.height_bound_s, wide.height_bound_s / 2);
  EXPECT_GE(low.throughput_Bps, 0.05 * wide.throughput_Bps);
  // An explicit height bound is respected.
  pp.loss = 0.05;
  pp.max_height_s = 12e-6;
  MultiTreePlan capped;
  ASSERT_EQ(plan_multitree(g, pp, &capped, &why), Status::kOk) << why;
  check_plan(g, pp, capped);
  EXPECT_LE(capped.trees[0].height_s, 12e-6 * (1 + 1e-9));
}

TEST(MultiTreePlanner, RandomGraphsInvariantsAndDeterminism) {
  std::mt19937_64 rng(2002);
  for (int i = 0; i < 60; ++i) {
    const int n = 2 + static_cast<int>(rng() % 15);
    const LinkGraph g = random_graph(n, rng, 0.1 + 0.5 * (rng() % 3) / 2.0);
    PlannerParams pp;
    pp.max_trees = 1 + static_cast<int>(rng() % 4);
    pp.reserve_Bps = rng() % 2 ? 0 : 2 * kGBps;
    pp.loss = 0.1 * (rng() % 4);
    SCOPED_TRACE("graph " + std::to_string(i) + " n=" + std::to_string(n));
    MultiTreePlan a, b;
    std::string why;
    ASSERT_EQ(plan_multitree(g, pp, &a, &why), Status::kOk) << why;
    check_plan(g, pp, a);
    ASSERT_EQ(plan_multitree(g, pp, &b, &why), Status::kOk) << why;
    ASSERT_EQ(plan_to_string(a), plan_to_string(b)) << "plans must be deterministic";
    ASSERT_EQ(a.fractions, b.fractions);
    // Throughput within the loss bound of the unbounded-height plan.
    std::vector<SpanningTree> all = pack_trees(g, pp, std::numeric_limits<double>::infinity());
    std::sort(all.begin(), all.end(),
              [](const SpanningTree& x, const SpanningTree& y) { return x.rate_Bps > y.rate_Bps; });
    double top = 0;
    for (int k = 0; k < std::min<int>(pp.max_trees, all.size()); ++k) top += all[k].rate_Bps;
    EXPECT_GE(a.throughput_Bps, (1 - pp.loss) * top * (1 - 1e-9));
  }
}

TEST(MultiTreePlanner, LargerGraphsAllRootsOrASubset) {
  std::mt19937_64 rng(48);
  const LinkGraph g = random_graph(48, rng, 0.15);
  for (int roots : {0, 4}) {
    PlannerParams pp;
    pp.max_trees = 6;
    pp.max_roots = roots;
    MultiTreePlan plan;
    std::string why;
    ASSERT_EQ(plan_multitree(g, pp, &plan, &why), Status::kOk) << why;
    check_plan(g, pp, plan);
  }
  PlannerParams bad;
  bad.max_roots = -1;
  MultiTreePlan plan;
  std::string why;
  EXPECT_EQ(plan_multitree(g, bad, &plan, &why), Status::kErrArg);
}

// ---------------------------------------------------------------------------------------
// Core under the harness

using testdata::Buffers;

// A random spanning tree over n nodes: random root, each node's parent a random earlier node
// of a random order.
SpanningTree random_tree(int n, std::mt19937_64& rng) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  SpanningTree t;
  t.root = order[0];
  t.parent.assign(n, -1);
  for (int i = 1; i < n; ++i) {
    // Mix chains and stars.
    t.parent[order[i]] = rng() % 2 ? order[i - 1] : order[rng() % i];
  }
  t.rate_Bps = 1;
  return t;
}

MultiTreePlan random_plan(int n, int k, std::mt19937_64& rng) {
  MultiTreePlan plan;
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    plan.trees.push_back(random_tree(n, rng));
    plan.fractions.push_back(rng() % 5 == 0 ? 0.0 : 1.0 + rng() % 10);
    sum += plan.fractions.back();
  }
  if (sum == 0) plan.fractions[0] = sum = 1;
  for (double& f : plan.fractions) f /= sum;
  double check = std::accumulate(plan.fractions.begin(), plan.fractions.end(), 0.0);
  plan.fractions.back() += 1 - check;
  if (plan.fractions.back() < 0) plan.fractions.back() = 0;
  return plan;
}

// The sequential reference: per tree, the value of a subtree is its node's input reduced with
// each child's subtree value in ascending child order (a = accumulator, b = child).
void subtree_value(const SpanningTree& t, int v, const std::vector<std::vector<uint8_t>>& in,
                   ROp op, DType dt, size_t off, size_t cnt, std::vector<uint8_t>* out) {
  const size_t e = dtype_size(dt);
  out->assign(in[v].begin() + off * e, in[v].begin() + (off + cnt) * e);
  for (int c : tree_children(t, v)) {
    std::vector<uint8_t> sub;
    subtree_value(t, c, in, op, dt, off, cnt, &sub);
    ASSERT_EQ(reduce(op, dt, out->data(), out->data(), sub.data(), cnt), Status::kOk);
  }
}

std::vector<uint8_t> reference(const MultiTreePlan& plan, ROp op, DType dt, size_t count,
                               const std::vector<std::vector<uint8_t>>& in) {
  const size_t e = dtype_size(dt);
  std::vector<uint8_t> res(count * e);
  const std::vector<size_t> counts = TreeAllreduce::split_counts(plan, count);
  size_t off = 0;
  for (size_t t = 0; t < plan.trees.size(); ++t) {
    std::vector<uint8_t> v;
    subtree_value(plan.trees[t], plan.trees[t].root, in, op, dt, off, counts[t], &v);
    if (counts[t] > 0) std::memcpy(res.data() + off * e, v.data(), counts[t] * e);
    off += counts[t];
  }
  return res;
}

void run_tree(harness::Options o, const MultiTreePlan& plan) {
  o.make_core = [plan](const RingParams& p, std::vector<uint8_t>* scratch) {
    return std::unique_ptr<CollectiveCore>(std::make_unique<TreeAllreduce>(p, plan, scratch));
  };
  {
    RingParams p;
    p.ring.resize(o.n);
    std::iota(p.ring.begin(), p.ring.end(), 0);
    p.count = o.count;
    p.dtype = o.dtype;
    p.op = o.op;
    int dummy = 0;
    p.sendbuf = p.recvbuf = &dummy;
    std::string why;
    ASSERT_EQ(TreeAllreduce::validate(p, plan, &why), Status::kOk) << why;
  }
  const Buffers in = testdata::make_inputs(o, o.seed * 31 + 7, /*wide=*/true);
  harness::Result res;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const size_t bytes = o.count * dtype_size(o.dtype);
  // Messages per rank: per tree and segment, one per child each way plus one each way to the
  // parent.
  RingParams p;
  p.dtype = o.dtype;
  p.segment_bytes = o.segment_bytes;
  p.tag_span = o.tag_span;
  const std::vector<size_t> counts = TreeAllreduce::split_counts(plan, o.count);
  const size_t seg = TreeAllreduce::segment_elems(p, counts);
  for (int c = 0; c < o.collectives; ++c) {
    const std::vector<uint8_t> want = reference(plan, o.op, o.dtype, o.count, in[c]);
    for (int r = 0; r < o.n; ++r) {
      ASSERT_EQ(res.outputs[c][r].size(), bytes);
      ASSERT_TRUE(res.outputs[c][r] == want)
          << "rank " << r << " differs from the reference, collective " << c;
      uint32_t msgs = 0;
      if (o.n > 1) {
        for (size_t t = 0; t < plan.trees.size(); ++t) {
          const uint32_t nseg = static_cast<uint32_t>((counts[t] + seg - 1) / seg);
          const uint32_t links = static_cast<uint32_t>(tree_children(plan.trees[t], r).size()) +
                                 (plan.trees[t].root == r ? 0 : 1);
          msgs += nseg * links;
        }
      }
      EXPECT_EQ(res.stats[c][r].messages_sent, msgs) << "rank " << r;
      EXPECT_EQ(res.stats[c][r].messages_received, msgs) << "rank " << r;
      EXPECT_EQ(res.stats[c][r].seq, static_cast<uint64_t>(c));
    }
  }
}

using testutil::valid_pairs;

TEST(MultiTreeAllreduce, EveryOpAndType) {
  std::mt19937_64 rng(11);
  int pairs = 0;
  for (const auto& [dt, op] : valid_pairs()) {
    for (bool in_place : {false, true}) {
      harness::Options o;
      o.n = 3 + static_cast<int>(rng() % 6);
      o.count = 41;
      o.dtype = dt;
      o.op = op;
      o.segment_bytes = 8 * dtype_size(dt);
      o.depth = 2;
      o.in_place = in_place;
      o.collectives = 2;
      o.seed = rng();
      const MultiTreePlan plan = random_plan(o.n, 1 + static_cast<int>(rng() % 3), rng);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + rop_name(op) + " n=" + std::to_string(o.n) +
                   (in_place ? " in place" : "") + "\n" + plan_to_string(plan));
      run_tree(o, plan);
      if (::testing::Test::HasFatalFailure()) return;
    }
    ++pairs;
  }
  EXPECT_GT(pairs, 80);
}

TEST(MultiTreeAllreduce, RandomSchedules) {
  const auto pairs = valid_pairs();
  std::mt19937_64 rng(5005);
  for (int i = 0; i < 400; ++i) {
    harness::Options o;
    o.n = 2 + static_cast<int>(rng() % 15);
    o.count = rng() % 5 == 0 ? rng() % 6 : rng() % 700;
    testutil::random_pair(&o, pairs, rng);
    o.segment_bytes = dtype_size(o.dtype) * (1 + rng() % 64);
    o.depth = 1 + static_cast<int>(rng() % 4);
    testutil::random_delivery(&o, rng);
    o.in_place = rng() & 1;
    o.collectives = 1 + static_cast<int>(rng() % 3);
    o.seed = rng();
    o.links = rng() % 4 == 0;
    testutil::random_start_times(&o, rng);
    MultiTreePlan plan;
    if (rng() % 2) {
      plan = random_plan(o.n, 1 + static_cast<int>(rng() % 4), rng);
    } else {
      const LinkGraph g = random_graph(o.n, rng, 0.4);
      PlannerParams pp;
      pp.max_trees = 1 + static_cast<int>(rng() % 4);
      std::string why;
      ASSERT_EQ(plan_multitree(g, pp, &plan, &why), Status::kOk) << why;
    }
    SCOPED_TRACE("schedule " + std::to_string(i) + " n=" + std::to_string(o.n) +
                 " count=" + std::to_string(o.count) + " " + dtype_name(o.dtype) + " " +
                 rop_name(o.op) + "\n" + plan_to_string(plan));
    run_tree(o, plan);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(MultiTreeAllreduce, EagerOnlyRendezvousOnlyAndSmallTagSpace) {
  std::mt19937_64 rng(77);
  for (double eager : {0.0, 1.0}) {
    for (int n : {2, 5, 16}) {
      harness::Options o;
      o.n = n;
      o.count = 3000;
      o.dtype = DType::kFloat;
      o.segment_bytes = 64;
      o.depth = 3;
      o.eager_probability = eager;
      o.in_place = n % 2 == 1;
      o.collectives = 3;
      o.seed = rng();
      o.tag_span = 1024;  // 3000 floats in 16-float segments need more tags: segments grow
      const MultiTreePlan plan = random_plan(n, 4, rng);
      SCOPED_TRACE("eager=" + std::to_string(eager) + " n=" + std::to_string(n));
      run_tree(o, plan);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(MultiTreeAllreduce, OneRankAndEmptyBuffers) {
  MultiTreePlan one;
  one.trees.push_back(SpanningTree{0, {-1}, 1, 0});
  one.fractions = {1};
  for (bool in_place : {false, true}) {
    for (size_t count : {0, 5}) {
      harness::Options o;
      o.n = 1;
      o.count = count;
      o.in_place = in_place;
      o.collectives = 2;
      run_tree(o, one);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::mt19937_64 rng(3);
  harness::Options o;
  o.n = 5;
  o.count = 0;
  o.collectives = 3;
  run_tree(o, random_plan(5, 3, rng));
}

TEST(MultiTreeAllreduce, InterleavedWithTheRing) {
  // Even collectives run the trees, odd ones the ring: same tags, no cross-matching.
  for (int n : {3, 8}) {
    std::mt19937_64 rng(n);
    const MultiTreePlan plan = random_plan(n, 3, rng);
    harness::Options o;
    o.n = n;
    o.count = 257;
    o.collectives = 4;
    o.seed = 9 + n;
    o.make_core = [plan](const RingParams& p, std::vector<uint8_t>* scratch) {
      if (p.seq % 2 == 0) {
        return std::unique_ptr<CollectiveCore>(std::make_unique<TreeAllreduce>(p, plan, scratch));
      }
      return std::unique_ptr<CollectiveCore>(std::make_unique<RingAllreduce>(p, scratch));
    };
    const Buffers in = testdata::make_inputs(o, 5, false);
    const harness::Result res = harness::run(o, in);
    ASSERT_EQ(res.status, Status::kOk) << res.error;
    EXPECT_FALSE(res.leftover_messages);
    for (int c = 0; c < o.collectives; ++c) {
      std::vector<uint8_t> seq = in[c][0];
      for (int r = 1; r < n; ++r) {
        ASSERT_EQ(reduce(o.op, o.dtype, seq.data(), seq.data(), in[c][r].data(), o.count),
                  Status::kOk);
      }
      for (int r = 0; r < n; ++r) EXPECT_TRUE(res.outputs[c][r] == seq) << "c " << c << " r " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Hand-driven: forged headers are protocol errors.

using testutil::find_action;
using testutil::forge_header;

struct Driven : testutil::DrivenCore<TreeAllreduce> {
  // Star rooted at 0 over 4 ranks, one segment.
  Driven(int rank, const MultiTreePlan& plan) {
    setup(rank, {0, 1, 2, 3}, 4);
    core = std::make_unique<TreeAllreduce>(p, plan, &scratch);
    start();
  }
};

MultiTreePlan star_plan() {
  MultiTreePlan plan;
  SpanningTree t;
  t.root = 0;
  t.parent = {-1, 0, 0, 0};
  t.rate_Bps = 1;
  plan.trees = {t};
  plan.fractions = {1.0};
  return plan;
}

TEST(MultiTreeProtocol, OverlapIncompleteAndStaleAreErrors) {
  {
    Driven d(0, star_plan());
    const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 1);
    ASSERT_NE(r1, nullptr);
    forge_header(r1->header, 4, kTreePhaseReduce, 0, 0, {0, 1});  // claims the root's input
    ActionList more = testutil::expect_recv_error(*d.core, *r1, 1.0, "overlapping");
  }
  {
    Driven d(0, star_plan());
    ActionList more;
    // Children 1 and 2 honest, 3 claims only {1}: the root would be incomplete and overlap.
    for (int c : {1, 2, 3}) {
      const Action* r = find_action(d.acts, Action::Kind::kRecv, c);
      ASSERT_NE(r, nullptr);
      forge_header(r->header, 4, kTreePhaseReduce, 0, 0, {c == 3 ? 2 : c});
      const Status st = d.core->on_recv(r->token, r->payload_bytes, 1.0, &more);
      if (c < 3) {
        ASSERT_EQ(st, Status::kOk) << d.core->error();
      }
      // Complete pending reductions in order.
      for (size_t i = 0; i < more.size(); ++i) {
        if (more[i].kind == Action::Kind::kReduce) {
          ActionList after;
          const Status rs = d.core->on_reduce(more[i].token, 2.0, &after);
          more.insert(more.end(), after.begin(), after.end());
          if (rs != Status::kOk) break;
        }
      }
    }
    EXPECT_FALSE(d.core->done());
    EXPECT_FALSE(d.core->error().empty());
  }
  {
    Driven d(2, star_plan());
    const Action* send = find_action(d.acts, Action::Kind::kSend, 0);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(send->payload, d.p.sendbuf) << "a leaf sends its input straight";
    ActionList more;
    ASSERT_EQ(d.core->on_send(send->token, 1.0, &more), Status::kOk);
    const Action* down = find_action(d.acts, Action::Kind::kRecv, 0);
    ASSERT_NE(down, nullptr) << "not in place: the broadcast receive is posted at once";
    forge_header(down->header, 4, kTreePhaseBcast, 0, 0, {0, 1, 2});  // rank 3 missing
    EXPECT_EQ(d.core->on_recv(down->token, down->payload_bytes, 2.0, &more), Status::kErrProtocol);
    EXPECT_NE(d.core->error().find("incomplete"), std::string::npos) << d.core->error();
  }
  {
    Driven d(0, star_plan());
    const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 1);
    forge_header(r1->header, 4, kTreePhaseReduce, 0, 0, {1}, /*seq=*/3);
    ActionList more;
    EXPECT_EQ(d.core->on_recv(r1->token, r1->payload_bytes, 1.0, &more), Status::kErrProtocol);
  }
  {
    Driven d(0, star_plan());
    const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 1);
    forge_header(r1->header, 4, kTreePhaseBcast, 0, 0, {1});  // wrong phase
    ActionList more;
    EXPECT_EQ(d.core->on_recv(r1->token, r1->payload_bytes, 1.0, &more), Status::kErrProtocol);
  }
}

TEST(MultiTreeProtocol, CanonicalChildOrderAndValidation) {
  Driven d(0, star_plan());
  std::vector<const Action*> recvs;
  for (int c : {3, 2, 1}) {
    const Action* r = find_action(d.acts, Action::Kind::kRecv, c);
    ASSERT_NE(r, nullptr);
    forge_header(r->header, 4, kTreePhaseReduce, 0, 0, {c});
    recvs.push_back(r);
  }
  // Children arrive 3, 2, 1: nothing is reduced before child 1's partial.
  ActionList more;
  ASSERT_EQ(d.core->on_recv(recvs[0]->token, 16, 1.0, &more), Status::kOk);
  ASSERT_EQ(d.core->on_recv(recvs[1]->token, 16, 1.0, &more), Status::kOk);
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr);
  ASSERT_EQ(d.core->on_recv(recvs[2]->token, 16, 1.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->a, d.p.sendbuf);
  EXPECT_EQ(red->b, recvs[2]->payload);
  EXPECT_EQ(red->dst, d.p.recvbuf);

  RingParams p = d.p;
  std::string why;
  MultiTreePlan bad = star_plan();
  bad.trees[0].parent = {-1, 2, 1, 0};  // 1 and 2 form a cycle
  EXPECT_EQ(TreeAllreduce::validate(p, bad, &why), Status::kErrArg);
  bad = star_plan();
  bad.fractions = {0.5};
  EXPECT_EQ(TreeAllreduce::validate(p, bad, &why), Status::kErrArg);
  p.depth = 0;
  EXPECT_EQ(TreeAllreduce::validate(p, star_plan(), &why), Status::kErrArg);
}

TEST(MultiTreeProtocol, BroadcastReceiveWaitsForThePartialsSend) {
  // recvbuf's segment is being sent (the partial): the broadcast may not be received into it
  // before that send completes. The harness cannot see this (the broadcast cannot arrive
  // earlier), so it is checked by hand. Chain 2 -> 1 -> 0 (root 0).
  MultiTreePlan chain = star_plan();
  chain.trees[0].parent = {-1, 0, 1, 0};
  {
    // Rank 1, not in place: reduces child 2 into recvbuf, sends that up.
    Driven d(1, chain);
    const Action* r2 = find_action(d.acts, Action::Kind::kRecv, 2);
    ASSERT_NE(r2, nullptr);
    EXPECT_EQ(find_action(d.acts, Action::Kind::kRecv, 0), nullptr);
    forge_header(r2->header, 4, kTreePhaseReduce, 0, 0, {2});
    ActionList a1, a2, a3;
    ASSERT_EQ(d.core->on_recv(r2->token, 16, 1.0, &a1), Status::kOk);
    const Action* red = find_action(a1, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &a2), Status::kOk);
    const Action* up = find_action(a2, Action::Kind::kSend, 0);
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->payload, d.p.recvbuf);
    EXPECT_EQ(find_action(a2, Action::Kind::kRecv, 0), nullptr) << "recvbuf is being sent";
    ASSERT_EQ(d.core->on_send(up->token, 3.0, &a3), Status::kOk);
    const Action* down = find_action(a3, Action::Kind::kRecv, 0);
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->payload, d.p.recvbuf);
    forge_header(down->header, 4, kTreePhaseBcast, 0, 0, {0, 1, 2, 3});
    ActionList a4, a5;
    ASSERT_EQ(d.core->on_recv(down->token, 16, 4.0, &a4), Status::kOk);
    const Action* fwd = find_action(a4, Action::Kind::kSend, 2);
    ASSERT_NE(fwd, nullptr) << "the broadcast is forwarded to the child";
    EXPECT_EQ(fwd->header, down->header);
    ASSERT_EQ(d.core->on_send(fwd->token, 5.0, &a5), Status::kOk);
    EXPECT_TRUE(d.core->done());
  }
  {
    // Rank 2, a leaf in place: sends its input from recvbuf, receives only afterwards.
    RingParams p;
    p.rank = 2;
    p.ring = {0, 1, 2, 3};
    p.count = 4;
    p.dtype = DType::kInt32;
    std::vector<int32_t> buf(4, 3);
    p.sendbuf = p.recvbuf = buf.data();
    std::vector<uint8_t> scratch;
    TreeAllreduce core(p, chain, &scratch);
    ActionList a0, a1;
    ASSERT_EQ(core.start(0.0, &a0), Status::kOk);
    const Action* up = find_action(a0, Action::Kind::kSend, 1);
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(find_action(a0, Action::Kind::kRecv), nullptr);
    ASSERT_EQ(core.on_send(up->token, 1.0, &a1), Status::kOk);
    EXPECT_NE(find_action(a1, Action::Kind::kRecv, 1), nullptr);
  }
}

TEST(MultiTreeAllreduce, SplitCountsTileTheBuffer) {
  MultiTreePlan plan;
  plan.fractions = {0.5, 0.0, 0.25, 0.25};
  for (size_t count : {0, 1, 3, 7, 1000}) {
    const std::vector<size_t> c = TreeAllreduce::split_counts(plan, count);
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), size_t{0}), count);
    EXPECT_EQ(c[1], 0u);
  }
  EXPECT_EQ(TreeAllreduce::split_counts(plan, 1000), (std::vector<size_t>{500, 0, 250, 250}));
}

}  // namespace
}  // namespace skipring
