// Algorithm selection (collectives/select.h): the cost model's shape and auto's choices.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "collectives/select.h"
#include "runtime/config.h"
#include "topology/multitree.h"

namespace skipring {
namespace {

TopologySummary flat(int n) {
  TopologySummary t;
  t.n = n;
  return t;
}

TEST(SelectNames, ParseAndNameRoundTrip) {
  for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kSkipRing, Algo::kRd, Algo::kRabenseifner,
                 Algo::kTree, Algo::kMultiTree, Algo::kHier}) {
    Algo back = Algo::kAuto;
    ASSERT_TRUE(parse_algo(algo_name(a), &back)) << algo_name(a);
    EXPECT_EQ(back, a);
  }
  Algo x = Algo::kRing;
  EXPECT_TRUE(parse_algo("RD", &x));
  EXPECT_EQ(x, Algo::kRd);
  EXPECT_FALSE(parse_algo("", &x));
  EXPECT_FALSE(parse_algo("ringg", &x));
}

TEST(SelectModel, CostsGrowWithSize) {
  const CostParams p;
  for (int n : {2, 3, 4, 7, 8, 16, 64}) {
    for (Algo a : {Algo::kRd, Algo::kRabenseifner, Algo::kRing}) {
      double prev = -1;
      for (size_t b = 8; b <= (size_t{64} << 20); b *= 2) {
        const double c = algo_cost(a, b, flat(n), p, 256 * 1024);
        ASSERT_TRUE(std::isfinite(c));
        EXPECT_GE(c, prev) << algo_name(a) << " n=" << n << " bytes=" << b;
        prev = c;
      }
    }
  }
}

TEST(SelectModel, LatencyBoundPicksRecursiveDoublingBandwidthBoundPicksRing) {
  const CostParams p;
  for (int n : {2, 3, 4, 5, 8, 16, 33, 64}) {
    EXPECT_EQ(select_algo(8, flat(n), p, 256 * 1024, false), Algo::kRd) << n;
    const Algo big = select_algo(size_t{256} << 20, flat(n), p, 256 * 1024, false);
    // Large: a bandwidth-optimal algorithm (the ring moves 2(n-1)/n S per link, as does
    // Rabenseifner for a power of two).
    EXPECT_TRUE(big == Algo::kRing || big == Algo::kRabenseifner) << n << " " << algo_name(big);
    if (n > 8) {
      EXPECT_EQ(big, Algo::kRing) << n;
    }
  }
}

TEST(SelectModel, AutoIsTheCheapestAndSkipMapsRingToSkipRing) {
  CostParams p;
  p.alpha_s = 5e-6;
  p.sigma_s = 2e-6;
  for (int n : {2, 4, 6, 12}) {
    for (size_t b = 8; b <= (size_t{16} << 20); b *= 8) {
      double cost = 0;
      const Algo a = select_algo(b, flat(n), p, 64 * 1024, true, &cost);
      EXPECT_NE(a, Algo::kAuto);
      EXPECT_NE(a, Algo::kRing);  // skip on: the ring is reported as skipring
      for (Algo other : modelled_algos()) {
        EXPECT_LE(cost, algo_cost(other, b, flat(n), p, 64 * 1024)) << algo_name(other);
      }
      EXPECT_DOUBLE_EQ(cost, algo_cost(a, b, flat(n), p, 64 * 1024));
    }
  }
}

TEST(SelectModel, HierOnlyAcrossHostsAndTreesOnlyWithAPlan) {
  const CostParams p;
  TopologySummary one = flat(8);
  EXPECT_TRUE(std::isinf(algo_cost(Algo::kHier, 1 << 20, one, p, 1 << 18)));
  EXPECT_TRUE(std::isinf(algo_cost(Algo::kTree, 1 << 20, one, p, 1 << 18)));
  EXPECT_TRUE(std::isinf(algo_cost(Algo::kMultiTree, 1 << 20, one, p, 1 << 18)));
  TopologySummary two = one;
  two.hosts = 2;
  two.max_local = 4;
  EXPECT_TRUE(std::isfinite(algo_cost(Algo::kHier, 1 << 20, two, p, 1 << 18)));
  two.trees = 3;
  two.tree_height = 3;
  two.tree_rate_Bps = 10e9;
  EXPECT_TRUE(std::isfinite(algo_cost(Algo::kMultiTree, 1 << 20, two, p, 1 << 18)));
  // One rank per host: nothing to do inside hosts, hier is the plain inter-host ring.
  TopologySummary spread = flat(4);
  spread.hosts = 4;
  EXPECT_TRUE(std::isinf(algo_cost(Algo::kHier, 1 << 20, spread, p, 1 << 18)));
}

TEST(SelectModel, SlowInterHostLinksFavourHierarchical) {
  CostParams p;
  p.alpha_s = 1e-6;
  p.beta_s = 1.0 / 20e9;  // fast inside a host
  p.inter_alpha_s = 10e-6;
  p.inter_beta_s = 1.0 / 1e9;  // slow between hosts
  TopologySummary t = flat(32);
  t.hosts = 4;
  t.max_local = 8;
  const size_t big = size_t{64} << 20;
  EXPECT_LT(algo_cost(Algo::kHier, big, t, p, 1 << 18), algo_cost(Algo::kRing, big, t, p, 1 << 18));
  EXPECT_EQ(select_algo(big, t, p, 1 << 18, false), Algo::kHier);
  const double slow_gain =
      algo_cost(Algo::kRing, big, t, p, 1 << 18) / algo_cost(Algo::kHier, big, t, p, 1 << 18);
  // Same links everywhere: inside a host hier moves as many bytes as the flat ring, so its
  // advantage shrinks.
  p.inter_alpha_s = p.alpha_s;
  p.inter_beta_s = p.beta_s;
  const double uniform_gain =
      algo_cost(Algo::kRing, big, t, p, 1 << 18) / algo_cost(Algo::kHier, big, t, p, 1 << 18);
  // Slow links: the flat ring pushes 2(n-1)/n S through each crossing link, hier 2(H-1)/H S
  // through each host's link (31/32 against 3/4 here).
  EXPECT_GT(slow_gain, 1.1);
  EXPECT_GT(slow_gain, uniform_gain);
}

TEST(SelectModel, NonPowerOfTwoPaysTheFoldIn) {
  const CostParams p;
  const size_t b = 1024;
  EXPECT_GT(algo_cost(Algo::kRd, b, flat(5), p, 1 << 18),
            algo_cost(Algo::kRd, b, flat(4), p, 1 << 18));
  EXPECT_DOUBLE_EQ(algo_cost(Algo::kRd, b, flat(1), p, 1 << 18), 0.0);
}

// Straggler-aware auto (select_algo_stragglers, SKIPRING_AUTO_STRAGGLER): the parameters
// measured at np 4 on the 2-core development machine (skipring_info --algo), where the model
// picks Rabenseifner from 512 KiB to 2 MiB with the ring within 1.2x of it.
CostParams dev_machine_np4() {
  CostParams p;
  p.alpha_s = p.inter_alpha_s = 2.68e-6;
  p.beta_s = p.inter_beta_s = 1.0 / 4.865e9;
  p.gamma_s = 1.0 / 27.935e9;
  p.sigma_s = 8.81e-6;
  p.cache_bytes = 1024.0 * 1024;
  p.mem_slowdown = 3.49;
  return p;
}

TEST(SelectStragglers, LateArrivalsSwitchMidSizesToTheSkipAheadRing) {
  const CostParams p = dev_machine_np4();
  TopologySummary t = flat(4);
  t.overlap = false;
  const size_t seg = 256 * 1024;
  const size_t mib = 1024 * 1024;
  ASSERT_EQ(select_algo(mib, t, p, seg, true), Algo::kRabenseifner);
  // No late arrival seen: the model's choice.
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, false, 1.5), Algo::kRabenseifner);
  // Seen: the skip-ahead ring, at its own modelled cost.
  double c = 0;
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 1.5, &c), Algo::kSkipRing);
  EXPECT_DOUBLE_EQ(c, algo_cost(Algo::kRing, mib, t, p, seg));
  // Latency-bound sizes keep recursive doubling: the ring costs many times more there.
  EXPECT_EQ(select_algo_stragglers(8192, t, p, seg, true, true, 1.5), Algo::kRd);
  // Off: factor below 1, or skip-ahead off (the plain ring would not tolerate anything).
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 0), Algo::kRabenseifner);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 0.99), Algo::kRabenseifner);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, false, true, 1.5), Algo::kRabenseifner);
  // A factor below the ring's ratio to Rabenseifner keeps Rabenseifner.
  const double ratio =
      algo_cost(Algo::kRing, mib, t, p, seg) / algo_cost(Algo::kRabenseifner, mib, t, p, seg);
  ASSERT_GT(ratio, 1.0);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 1.0 + (ratio - 1) / 2),
            Algo::kRabenseifner);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, ratio * 1.01), Algo::kSkipRing);
  // Where the choice's modelled time is below the skip threshold's floor, no preference: a call
  // that short is over before skip-ahead could act.
  const double best = algo_cost(Algo::kRabenseifner, mib, t, p, seg);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 1.5, nullptr, best * 1.01),
            Algo::kRabenseifner);
  EXPECT_EQ(select_algo_stragglers(mib, t, p, seg, true, true, 1.5, nullptr, best * 0.99),
            Algo::kSkipRing);
  // Two ranks: nothing for skip-ahead to do while the other is late, so no preference.
  TopologySummary two = flat(2);
  two.overlap = false;
  const Algo two_best = select_algo(mib, two, p, seg, true);
  ASSERT_NE(two_best, Algo::kSkipRing);
  EXPECT_EQ(select_algo_stragglers(mib, two, p, seg, true, true, 100), two_best);
}

TEST(SelectStragglers, EitherTheModelsChoiceOrASkipAheadAlgorithmWithinTheFactor) {
  for (int hosts : {1, 2, 4}) {
    for (int n : {2, 3, 4, 8, 16}) {
      if (n < hosts) continue;
      TopologySummary t = flat(n);
      t.hosts = hosts;
      t.max_local = (n + hosts - 1) / hosts;
      t.ranks_per_host.assign(hosts, n / hosts);
      for (int h = 0; h < n % hosts; ++h) ++t.ranks_per_host[h];
      for (bool overlap : {true, false}) {
        t.overlap = overlap;
        for (double inter_gbps : {5.0, 0.1}) {
          CostParams p = dev_machine_np4();
          p.inter_beta_s = 1.0 / (inter_gbps * 1e9);
          for (double f : {1.0, 1.5, 4.0}) {
            for (size_t b = 8; b <= (size_t{256} << 20); b *= 4) {
              double best_cost = 0;
              const Algo best = select_algo(b, t, p, 256 * 1024, true, &best_cost);
              double c = 0;
              const Algo a = select_algo_stragglers(b, t, p, 256 * 1024, true, true, f, &c);
              SCOPED_TRACE(testing::Message()
                           << "n " << n << " hosts " << hosts << " bytes " << b << " factor " << f);
              if (algo_row(best).skip_ahead) {
                EXPECT_EQ(a, best);  // already tolerant: unchanged
              }
              if (a != best) {
                EXPECT_TRUE(algo_row(a).skip_ahead) << algo_name(a);
                EXPECT_LE(c, f * best_cost * (1 + 1e-12));
                EXPECT_GE(c, best_cost);
              } else {
                EXPECT_DOUBLE_EQ(c, best_cost);
              }
              // Without stragglers: select_algo's answer, whatever the factor.
              EXPECT_EQ(select_algo_stragglers(b, t, p, 256 * 1024, true, false, f), best);
            }
          }
        }
      }
    }
  }
}

TEST(SelectTable, OneRowPerSizeAndAChoiceEach) {
  const std::string table = decision_table(flat(4), CostParams{}, 1 << 18, true, 1 << 20);
  int rows = 0;
  for (size_t pos = 0; (pos = table.find('\n', pos)) != std::string::npos; ++pos) ++rows;
  // Header, 8 B .. 1 MiB by x4 (9 sizes), footer.
  EXPECT_EQ(rows, 1 + 9 + 1) << table;
  EXPECT_NE(table.find("rd\n"), std::string::npos) << table;
  EXPECT_NE(table.find("skipring\n"), std::string::npos) << table;
}

}  // namespace
}  // namespace skipring

namespace skipring {
namespace {

MultiTreePlan star_and_chain(int n) {
  MultiTreePlan plan;
  SpanningTree star;
  star.root = 0;
  star.parent.assign(n, 0);
  star.parent[0] = -1;
  star.rate_Bps = 10e9;
  SpanningTree chain;
  chain.root = 0;
  chain.parent.resize(n);
  for (int v = 0; v < n; ++v) chain.parent[v] = v - 1;
  chain.rate_Bps = 10e9;
  plan.trees = {star, chain};
  plan.fractions = {0.5, 0.5};
  plan.throughput_Bps = 20e9;
  return plan;
}

TEST(SelectTrees, SharedLinksCapThePlannedRate) {
  const int n = 5;
  const MultiTreePlan plan = star_and_chain(n);
  // Links not limiting: the planner's figure.
  EXPECT_DOUBLE_EQ(effective_tree_rate(plan, {}, 0, 0), 20e9);
  // The star's root takes n-1 children at half the data, plus one chain child: 2.5 bytes in
  // per byte of data; with 5 GB/s per rank the plan runs at 2 GB/s.
  EXPECT_NEAR(effective_tree_rate(plan, {}, 5e9, 0), 5e9 / (0.5 * (n - 1) + 0.5), 1);
  // Hosts {0,1,2} and {3,4}: the star crosses twice, the chain once (2 -> 3), all into host 0's
  // side: 1.5 bytes per byte of data through host 0's link.
  EXPECT_NEAR(effective_tree_rate(plan, {0, 0, 0, 1, 1}, 0, 3e9), 3e9 / 1.5, 1);
}

TEST(SelectTrees, OneHostStarNeverBeatsTheRingForLargeMessages) {
  // What Communicator feeds the model on one host: a star (height 1) whose root is limited to
  // its own bandwidth shared by n-1 children.
  CostParams p;
  TopologySummary t;
  t.n = 8;
  MultiTreePlan plan;
  SpanningTree star;
  star.root = 0;
  star.parent.assign(8, 0);
  star.parent[0] = -1;
  star.rate_Bps = 1.0 / p.beta_s;
  plan.trees = {star};
  plan.fractions = {1.0};
  plan.throughput_Bps = star.rate_Bps;
  t.tree1_height = 1;
  t.tree1_rate_Bps = effective_tree_rate(plan, {}, 1.0 / p.beta_s, 0);
  EXPECT_LT(algo_cost(Algo::kRing, size_t{64} << 20, t, p, 1 << 18),
            algo_cost(Algo::kTree, size_t{64} << 20, t, p, 1 << 18));
}

}  // namespace
}  // namespace skipring
