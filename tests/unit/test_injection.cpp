// SKIPRING_INJECT: parsing of every key and unit, error messages, and the deterministic delay
// plan (matching, prob/every, distributions, reproducibility). No timing is measured here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "straggler/injection.h"

namespace skipring {
namespace {

using Dist = InjectRule::Dist;

InjectPlan parse_ok(const std::string& spec) {
  InjectPlan plan;
  std::string err;
  EXPECT_EQ(InjectPlan::parse(spec, &plan, &err), Status::kOk) << spec << ": " << err;
  return plan;
}

InjectRule one_rule(const std::string& spec) {
  const InjectPlan plan = parse_ok(spec);
  EXPECT_EQ(plan.rules().size(), 1u) << spec;
  return plan.rules().empty() ? InjectRule{} : plan.rules()[0];
}

// ---- parsing ------------------------------------------------------------------------------------

TEST(InjectParse, ExampleSpec) {
  const InjectRule r = one_rule("rank=1,delay=2ms,at=rs");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.dist, Dist::kFixed);
  EXPECT_DOUBLE_EQ(r.a, 2e-3);
  EXPECT_FALSE(r.at_arrive);
  EXPECT_TRUE(r.at_rs);
  EXPECT_FALSE(r.at_ag);
  EXPECT_EQ(r.prob, 1.0);
  EXPECT_EQ(r.every, 1u);
  EXPECT_EQ(r.seed, 0u);
  EXPECT_EQ(r.text, "rank=1,delay=2ms,at=rs");
}

TEST(InjectParse, EmptySpecsHaveNoRules) {
  for (const char* spec : {"", "   ", ";", " ; ; ", "\t"}) {
    const InjectPlan plan = parse_ok(spec);
    EXPECT_TRUE(plan.empty()) << "'" << spec << "'";
    EXPECT_EQ(plan.delay(0, 0, InjectPoint::kReduceScatter, 0), 0.0);
    EXPECT_EQ(plan.to_string(), "");
  }
  EXPECT_EQ(parse_ok("rank=0,delay=1ms;").rules().size(), 1u);
}

TEST(InjectParse, Defaults) {
  const InjectRule r = one_rule("rank=3,delay=1s");
  EXPECT_EQ(r.rank, 3);
  EXPECT_TRUE(r.at_rs);
  EXPECT_FALSE(r.at_ag);
  EXPECT_FALSE(r.at_arrive);
  EXPECT_EQ(r.prob, 1.0);
  EXPECT_EQ(r.every, 1u);
  EXPECT_EQ(r.seed, 0u);
}

TEST(InjectParse, EveryKey) {
  const InjectRule r =
      one_rule("rank=*,dist=uniform:1ms:3ms,at=ag,prob=0.25,every=4,seed=18446744073709551615");
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.dist, Dist::kUniform);
  EXPECT_DOUBLE_EQ(r.a, 1e-3);
  EXPECT_DOUBLE_EQ(r.b, 3e-3);
  EXPECT_FALSE(r.at_arrive);
  EXPECT_FALSE(r.at_rs);
  EXPECT_TRUE(r.at_ag);
  EXPECT_DOUBLE_EQ(r.prob, 0.25);
  EXPECT_EQ(r.every, 4u);
  EXPECT_EQ(r.seed, 18446744073709551615ull);
}

TEST(InjectParse, AtValues) {
  InjectRule r = one_rule("rank=0,delay=1ms,at=arrive");
  EXPECT_TRUE(r.at_arrive && !r.at_rs && !r.at_ag);
  r = one_rule("rank=0,delay=1ms,at=rs");
  EXPECT_TRUE(!r.at_arrive && r.at_rs && !r.at_ag);
  r = one_rule("rank=0,delay=1ms,at=ag");
  EXPECT_TRUE(!r.at_arrive && !r.at_rs && r.at_ag);
  r = one_rule("rank=0,delay=1ms,at=step");
  EXPECT_TRUE(!r.at_arrive && r.at_rs && r.at_ag);
}

TEST(InjectParse, Distributions) {
  InjectRule r = one_rule("rank=0,dist=exp:250us");
  EXPECT_EQ(r.dist, Dist::kExp);
  EXPECT_DOUBLE_EQ(r.a, 250e-6);
  r = one_rule("rank=0,dist=lognormal:2ms:0.5");
  EXPECT_EQ(r.dist, Dist::kLognormal);
  EXPECT_DOUBLE_EQ(r.a, 2e-3);
  EXPECT_DOUBLE_EQ(r.b, 0.5);
  r = one_rule("rank=0,dist=lognormal:2ms:0");
  EXPECT_DOUBLE_EQ(r.b, 0.0);
  r = one_rule("rank=0,dist=uniform:1ms:1ms");  // LO == HI is fine
  EXPECT_DOUBLE_EQ(r.a, r.b);
}

TEST(InjectParse, Units) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"1ns", 1e-9},     {"1us", 1e-6},         {"1ms", 1e-3},      {"1s", 1.0},
      {"2.5ms", 2.5e-3}, {"0.5s", 0.5},         {"1500ns", 1.5e-6}, {".75us", 0.75e-6},
      {"3.ms", 3e-3},    {"1e3us", 1e-3},       {"0ms", 0.0},       {"+4ms", 4e-3},
      {"10 ms", 10e-3},  {"12.25us", 12.25e-6},
  };
  for (const auto& [text, seconds] : cases) {
    const InjectRule r = one_rule("rank=0,delay=" + text);
    EXPECT_NEAR(r.a, seconds, seconds * 1e-12) << text;
  }
}

TEST(InjectParse, WhitespaceTolerated) {
  const InjectPlan plan =
      parse_ok("  rank = 2 , delay = 1.5ms , at = step ;\n rank=* , dist = uniform : 1us : 2us ; ");
  ASSERT_EQ(plan.rules().size(), 2u);
  EXPECT_EQ(plan.rules()[0].rank, 2);
  EXPECT_DOUBLE_EQ(plan.rules()[0].a, 1.5e-3);
  EXPECT_TRUE(plan.rules()[0].at_rs && plan.rules()[0].at_ag);
  EXPECT_EQ(plan.rules()[1].rank, -1);
  EXPECT_DOUBLE_EQ(plan.rules()[1].b, 2e-6);
}

TEST(InjectParse, ToStringRoundTrips) {
  const std::string spec =
      "rank=1,delay=2ms,at=rs;rank=*,dist=exp:100us,at=arrive,prob=0.1;"
      "rank=0,dist=uniform:1.5ms:2s,at=step,every=3,seed=7;rank=4,dist=lognormal:750ns:0.25,at=ag";
  const InjectPlan plan = parse_ok(spec);
  EXPECT_EQ(plan.to_string(), spec);
  EXPECT_EQ(parse_ok(plan.to_string()).to_string(), spec);
  EXPECT_EQ(parse_ok("rank=1, delay=0.002s").to_string(), "rank=1,delay=2ms,at=rs");
}

TEST(InjectParse, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(2.5), "2.5s");
  EXPECT_EQ(format_duration(0.0025), "2.5ms");
  EXPECT_EQ(format_duration(1e-6), "1us");
  EXPECT_EQ(format_duration(12e-9), "12ns");
}

// Every malformed spec fails with kErrConfig, names the variable and the offending token, and
// leaves the output plan untouched.
TEST(InjectParse, MalformedSpecsNameTheFault) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      // {spec, token the message must contain}
      {"rank=x,delay=1ms", "bad rank 'x'"},
      {"rank=-1,delay=1ms", "'-1'"},
      {"rank=1.5,delay=1ms", "'1.5'"},
      {"rank=99999999999,delay=1ms", "'99999999999'"},
      {"rank=,delay=1ms", "bad rank ''"},
      {"delay=1ms", "missing 'rank'"},
      {"rank=1", "missing 'delay' or 'dist'"},
      {"rank=1,delay=1ms,dist=exp:1ms", "both 'delay' and 'dist'"},
      {"rank=1,delay=1ms,color=red", "unknown key 'color'"},
      {"rank=1,delay=1ms,step=-1", "bad step '-1'"},
      {"rank=1,delay=1ms,step=x", "bad step 'x'"},
      {"rank=1,delay=1ms,at=arrive,step=0", "'step' does not apply to at=arrive"},
      {"rank=1,rank=2,delay=1ms", "duplicate key 'rank'"},
      {"rank=1,delay=1ms,delay=2ms", "duplicate key 'delay'"},
      {"rank=1,delay=1ms,at=rs,at=ag", "duplicate key 'at'"},
      {"rank=1,delay=5", "bad delay '5'"},
      {"rank=1,delay=5min", "bad delay '5min'"},
      {"rank=1,delay=5ks", "bad delay '5ks'"},
      {"rank=1,delay=ms", "bad delay 'ms'"},
      {"rank=1,delay=1.2.3ms", "bad delay '1.2.3ms'"},
      {"rank=1,delay=infs", "bad delay 'infs'"},
      {"rank=1,delay=-1ms", "bad delay '-1ms'"},
      {"rank=1,delay=-0ms", "bad delay '-0ms'"},
      {"rank=1,dist=exp:-1ms", "MEAN '-1ms'"},
      {"rank=1,dist=exp:1", "MEAN '1'"},
      {"rank=1,dist=exp", "bad dist 'exp'"},
      {"rank=1,dist=exp:1ms:2ms", "bad dist 'exp:1ms:2ms'"},
      {"rank=1,dist=gamma:1ms", "bad dist 'gamma:1ms'"},
      {"rank=1,dist=uniform:5ms:1ms", "LO '5ms' > HI '1ms'"},
      {"rank=1,dist=uniform:1ms", "bad dist 'uniform:1ms'"},
      {"rank=1,dist=uniform:1ms:2xs", "HI '2xs'"},
      {"rank=1,dist=uniform:-1ms:2ms", "LO '-1ms'"},
      {"rank=1,dist=lognormal:1ms:-0.5", "SIGMA '-0.5'"},
      {"rank=1,dist=lognormal:1ms:1ms", "SIGMA '1ms'"},
      {"rank=1,dist=lognormal:-1ms:0.5", "MEDIAN '-1ms'"},
      {"rank=1,delay=1ms,at=middle", "bad at 'middle'"},
      {"rank=1,delay=1ms,prob=1.5", "bad prob '1.5'"},
      {"rank=1,delay=1ms,prob=-0.1", "bad prob '-0.1'"},
      {"rank=1,delay=1ms,prob=half", "bad prob 'half'"},
      {"rank=1,delay=1ms,every=0", "bad every '0'"},
      {"rank=1,delay=1ms,every=-2", "bad every '-2'"},
      {"rank=1,delay=1ms,seed=abc", "bad seed 'abc'"},
      {"rank=1,delay=1ms,seed=18446744073709551616", "bad seed '18446744073709551616'"},
      {"rank=1,delay", "'delay' is not key=value"},
      // Finite and at most 1h (issue 13: 1e300s slept 0 s; a huge sigma hung the rank).
      {"rank=1,delay=1e300s", "bad delay '1e300s': must be at most 3600s"},
      {"rank=1,delay=3601s", "bad delay '3601s': must be at most 3600s"},
      {"rank=1,delay=1e13ns", "bad delay '1e13ns': must be at most"},
      {"rank=1,delay=nanms", "bad delay 'nanms'"},
      {"rank=1,delay=infms", "bad delay 'infms'"},
      {"rank=1,delay=1e400s", "bad delay '1e400s'"},
      {"rank=1,dist=exp:2h", "MEAN '2h'"},
      {"rank=1,dist=exp:1e300s", "MEAN '1e300s': must be at most 3600s"},
      {"rank=1,dist=uniform:1ms:1e9s", "HI '1e9s': must be at most 3600s"},
      {"rank=1,dist=lognormal:1e300s:1", "MEDIAN '1e300s': must be at most 3600s"},
      {"rank=1,dist=lognormal:1ms:1e300", "SIGMA '1e300': expects a plain number in [0, 10]"},
      {"rank=1,dist=lognormal:1ms:10.5", "SIGMA '10.5'"},
      {"rank=1,dist=lognormal:1ms:nan", "SIGMA 'nan'"},
      {"rank=1,dist=lognormal:1ms:inf", "SIGMA 'inf'"},
      {"rank=1,,delay=1ms", "empty item"},
  };
  for (const auto& [spec, token] : bad) {
    InjectPlan plan = parse_ok("rank=7,delay=7ms");
    std::string err;
    EXPECT_EQ(InjectPlan::parse(spec, &plan, &err), Status::kErrConfig) << spec;
    EXPECT_NE(err.find("SKIPRING_INJECT"), std::string::npos) << spec << " -> " << err;
    EXPECT_NE(err.find(token), std::string::npos) << spec << " -> " << err;
    EXPECT_NE(err.find("rule 1 ('" + spec + "')"), std::string::npos) << spec << " -> " << err;
    ASSERT_EQ(plan.rules().size(), 1u) << spec;
    EXPECT_EQ(plan.rules()[0].rank, 7) << spec;
  }
}

TEST(InjectParse, ErrorNamesRuleIndexAndText) {
  InjectPlan plan;
  std::string err;
  ASSERT_EQ(InjectPlan::parse("rank=0,delay=1ms; rank=x,delay=1ms ;rank=2,delay=1ms", &plan, &err),
            Status::kErrConfig);
  EXPECT_EQ(err,
            "SKIPRING_INJECT: rule 2 ('rank=x,delay=1ms'): bad rank 'x': expects an integer >= 0 "
            "or '*'");
  // A null error pointer is allowed.
  EXPECT_EQ(InjectPlan::parse("rank=x,delay=1ms", &plan, nullptr), Status::kErrConfig);
}

TEST(InjectParse, LargestAcceptedValues) {
  EXPECT_DOUBLE_EQ(one_rule("rank=0,delay=3600s").a, kMaxInjectDelay);
  EXPECT_DOUBLE_EQ(one_rule("rank=0,delay=3.6e12ns").a, kMaxInjectDelay);
  EXPECT_DOUBLE_EQ(one_rule("rank=0,dist=lognormal:1ms:10").b, kMaxInjectSigma);
  EXPECT_DOUBLE_EQ(one_rule("rank=0,dist=uniform:0s:3600s").b, kMaxInjectDelay);
}

// Ranks are checked against the job's size: rank=99 on 2 ranks is an error naming the rule and
// the field; ranks inside it and '*' pass.
TEST(InjectParse, CheckRanksAgainstTheJobSize) {
  std::string err;
  EXPECT_EQ(parse_ok("rank=1,delay=1ms;rank=*,delay=1ms").check_ranks(2, &err), Status::kOk);
  EXPECT_EQ(parse_ok("").check_ranks(1, &err), Status::kOk);
  EXPECT_EQ(parse_ok("rank=99,delay=1ms").check_ranks(2, &err), Status::kErrConfig);
  EXPECT_EQ(err,
            "SKIPRING_INJECT: rule 1 ('rank=99,delay=1ms'): bad rank '99': the job has 2 ranks "
            "(MPI_COMM_WORLD), expects an integer in [0, 1] or '*'");
  EXPECT_EQ(parse_ok("rank=0,delay=1ms; rank=2,dist=exp:1ms").check_ranks(2, &err),
            Status::kErrConfig);
  EXPECT_NE(err.find("rule 2 ('rank=2,dist=exp:1ms'): bad rank '2'"), std::string::npos) << err;
  EXPECT_EQ(parse_ok("rank=1,delay=1ms").check_ranks(1, &err), Status::kErrConfig);
  EXPECT_NE(err.find("the job has 1 rank (MPI_COMM_WORLD), expects an integer in [0, 0]"),
            std::string::npos)
      << err;
  EXPECT_EQ(parse_ok("rank=1,delay=1ms").check_ranks(1, nullptr), Status::kErrConfig);
}

// ---- the plan -----------------------------------------------------------------------------------

TEST(InjectDelay, ExampleOnlyHitsItsRankAndPoint) {
  const InjectPlan plan = parse_ok("rank=1,delay=2ms,at=rs");
  EXPECT_DOUBLE_EQ(plan.delay(1, 0, InjectPoint::kReduceScatter, 0), 2e-3);
  EXPECT_DOUBLE_EQ(plan.delay(1, 17, InjectPoint::kReduceScatter, 5), 2e-3);
  EXPECT_EQ(plan.delay(0, 0, InjectPoint::kReduceScatter, 0), 0.0);
  EXPECT_EQ(plan.delay(2, 0, InjectPoint::kReduceScatter, 0), 0.0);
  EXPECT_EQ(plan.delay(1, 0, InjectPoint::kAllgather, 0), 0.0);
  EXPECT_EQ(plan.delay(1, 0, InjectPoint::kArrive, 0), 0.0);
}

TEST(InjectDelay, StepKeyPicksOneStep) {
  const InjectPlan plan = parse_ok("rank=2,delay=30us,at=step,step=1");
  EXPECT_EQ(plan.to_string(), "rank=2,delay=30us,at=step,step=1");
  EXPECT_EQ(plan.delay(2, 0, InjectPoint::kReduceScatter, 0), 0.0);
  EXPECT_DOUBLE_EQ(plan.delay(2, 0, InjectPoint::kReduceScatter, 1), 30e-6);
  EXPECT_DOUBLE_EQ(plan.delay(2, 4, InjectPoint::kAllgather, 1), 30e-6);
  EXPECT_EQ(plan.delay(2, 0, InjectPoint::kAllgather, 2), 0.0);
  EXPECT_EQ(plan.delay(1, 0, InjectPoint::kReduceScatter, 1), 0.0);
}

TEST(InjectDelay, StarMatchesEveryRank) {
  const InjectPlan plan = parse_ok("rank=*,delay=1us,at=arrive");
  for (int rank = 0; rank < 64; ++rank) {
    EXPECT_DOUBLE_EQ(plan.delay(rank, 3, InjectPoint::kArrive, 0), 1e-6) << rank;
    EXPECT_EQ(plan.delay(rank, 3, InjectPoint::kReduceScatter, 0), 0.0) << rank;
  }
}

TEST(InjectDelay, SeveralRulesAddUp) {
  const InjectPlan plan =
      parse_ok("rank=1,delay=2ms;rank=*,delay=1ms;rank=1,delay=500us,at=step;rank=0,delay=1s");
  EXPECT_DOUBLE_EQ(plan.delay(1, 0, InjectPoint::kReduceScatter, 0), 3.5e-3);
  EXPECT_DOUBLE_EQ(plan.delay(1, 0, InjectPoint::kAllgather, 0), 0.5e-3);
  EXPECT_DOUBLE_EQ(plan.delay(2, 0, InjectPoint::kReduceScatter, 0), 1e-3);
  EXPECT_DOUBLE_EQ(plan.delay(0, 0, InjectPoint::kReduceScatter, 0), 1.001);
}

TEST(InjectDelay, StepCoversRsAndAgNotArrive) {
  const InjectPlan plan = parse_ok("rank=0,delay=1ms,at=step");
  for (int step = 0; step < 8; ++step) {
    EXPECT_DOUBLE_EQ(plan.delay(0, 1, InjectPoint::kReduceScatter, step), 1e-3);
    EXPECT_DOUBLE_EQ(plan.delay(0, 1, InjectPoint::kAllgather, step), 1e-3);
  }
  EXPECT_EQ(plan.delay(0, 1, InjectPoint::kArrive, 0), 0.0);

  const InjectPlan ag = parse_ok("rank=0,delay=1ms,at=ag");
  EXPECT_EQ(ag.delay(0, 1, InjectPoint::kReduceScatter, 0), 0.0);
  EXPECT_DOUBLE_EQ(ag.delay(0, 1, InjectPoint::kAllgather, 0), 1e-3);
  EXPECT_EQ(ag.delay(0, 1, InjectPoint::kArrive, 0), 0.0);

  const InjectPlan arrive = parse_ok("rank=0,delay=1ms,at=arrive");
  EXPECT_DOUBLE_EQ(arrive.delay(0, 1, InjectPoint::kArrive, 0), 1e-3);
  EXPECT_EQ(arrive.delay(0, 1, InjectPoint::kReduceScatter, 0), 0.0);
  EXPECT_EQ(arrive.delay(0, 1, InjectPoint::kAllgather, 0), 0.0);
}

TEST(InjectDelay, EveryNthCollective) {
  const InjectPlan plan = parse_ok("rank=0,delay=1ms,every=3");
  for (uint64_t seq = 0; seq < 30; ++seq) {
    const double d = plan.delay(0, seq, InjectPoint::kReduceScatter, 0);
    EXPECT_EQ(d, seq % 3 == 0 ? 1e-3 : 0.0) << seq;
  }
  const InjectPlan every1 = parse_ok("rank=0,delay=1ms,every=1");
  for (uint64_t seq = 0; seq < 10; ++seq) {
    EXPECT_DOUBLE_EQ(every1.delay(0, seq, InjectPoint::kReduceScatter, 0), 1e-3);
  }
}

TEST(InjectDelay, ProbZeroNeverProbOneAlways) {
  const InjectPlan never = parse_ok("rank=*,delay=1ms,at=step,prob=0");
  const InjectPlan always = parse_ok("rank=*,delay=1ms,at=step,prob=1");
  for (uint64_t seq = 0; seq < 500; ++seq) {
    for (int step = 0; step < 6; ++step) {
      const int rank = static_cast<int>(seq % 5);
      EXPECT_EQ(never.delay(rank, seq, InjectPoint::kAllgather, step), 0.0);
      EXPECT_EQ(always.delay(rank, seq, InjectPoint::kReduceScatter, step), 1e-3);
    }
  }
}

TEST(InjectDelay, ProbFiresInRoughlyThatFraction) {
  const InjectPlan plan = parse_ok("rank=2,delay=1ms,prob=0.3,seed=11");
  int fired = 0;
  for (uint64_t seq = 0; seq < 1000; ++seq) {
    for (int step = 0; step < 10; ++step) {
      if (plan.delay(2, seq, InjectPoint::kReduceScatter, step) > 0) ++fired;
    }
  }
  // 10,000 Bernoulli(0.3) draws: sd ~ 46; +-300 is over 6 sd.
  EXPECT_GT(fired, 2700);
  EXPECT_LT(fired, 3300);
}

// Many independent-looking draws of one rule: vary seq, step and rank.
std::vector<double> samples(const InjectPlan& plan, int count) {
  std::vector<double> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    out.push_back(
        plan.delay(i % 7, static_cast<uint64_t>(i / 7), InjectPoint::kReduceScatter, i % 3));
  }
  return out;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

TEST(InjectDelay, ExponentialMean) {
  const std::vector<double> v = samples(parse_ok("rank=*,dist=exp:2ms"), 20000);
  EXPECT_NEAR(mean_of(v), 2e-3, 2e-3 * 0.05);
  EXPECT_NEAR(median_of(v), 2e-3 * std::log(2.0), 2e-3 * 0.05);  // exp median = mean ln 2
  for (double x : v) EXPECT_GE(x, 0.0);
}

TEST(InjectDelay, UniformMeanAndRange) {
  const std::vector<double> v = samples(parse_ok("rank=*,dist=uniform:1ms:3ms,seed=5"), 20000);
  EXPECT_NEAR(mean_of(v), 2e-3, 2e-3 * 0.02);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, 1e-3);
  EXPECT_LE(*hi, 3e-3);
  EXPECT_LT(*lo, 1.01e-3);  // and it actually spreads over the range
  EXPECT_GT(*hi, 2.99e-3);
}

TEST(InjectDelay, LognormalMedianAndMean) {
  const std::vector<double> v = samples(parse_ok("rank=*,dist=lognormal:1ms:0.5,seed=9"), 20000);
  EXPECT_NEAR(median_of(v), 1e-3, 1e-3 * 0.05);
  EXPECT_NEAR(mean_of(v), 1e-3 * std::exp(0.5 * 0.5 / 2), 1e-3 * 0.05);
  for (double x : v) EXPECT_GT(x, 0.0);
  // sigma 0 degenerates to the median.
  const InjectPlan fixed = parse_ok("rank=*,dist=lognormal:1ms:0");
  EXPECT_DOUBLE_EQ(fixed.delay(3, 4, InjectPoint::kReduceScatter, 1), 1e-3);
}

// Long tails are cut at 1h: the widest accepted lognormal and exponential give finite draws in
// [0, 3600] s, the cap is reached, and the draws are not all capped.
TEST(InjectDelay, DrawsAreFiniteAndCappedAtOneHour) {
  for (const char* spec :
       {"rank=0,dist=lognormal:3600s:10,at=step", "rank=0,dist=lognormal:1ms:10,at=step",
        "rank=0,dist=exp:3600s,at=step"}) {
    const InjectPlan plan = parse_ok(spec);
    int capped = 0, below = 0;
    for (uint64_t seq = 0; seq < 4000; ++seq) {
      const double d = plan.delay(0, seq, InjectPoint::kReduceScatter, 0);
      ASSERT_TRUE(std::isfinite(d)) << spec << " seq " << seq;
      ASSERT_GE(d, 0) << spec;
      ASSERT_LE(d, kMaxInjectDelay) << spec;
      capped += d == kMaxInjectDelay;
      below += d < kMaxInjectDelay;
    }
    EXPECT_GT(capped, 0) << spec;
    EXPECT_GT(below, 0) << spec;
  }
}

TEST(InjectDelay, DeterministicAndSeedDependent) {
  const std::string spec = "rank=*,dist=exp:1ms,at=step,prob=0.5,seed=42";
  const InjectPlan a = parse_ok(spec);
  const InjectPlan b = parse_ok(spec);  // a separate parse, as another process would do
  const InjectPlan other = parse_ok("rank=*,dist=exp:1ms,at=step,prob=0.5,seed=43");
  int differ = 0;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    for (int step = 0; step < 4; ++step) {
      for (InjectPoint p : {InjectPoint::kReduceScatter, InjectPoint::kAllgather}) {
        const double d = a.delay(1, seq, p, step);
        EXPECT_EQ(d, a.delay(1, seq, p, step));
        EXPECT_EQ(d, b.delay(1, seq, p, step));
        if (d != other.delay(1, seq, p, step)) ++differ;
      }
    }
  }
  EXPECT_GT(differ, 1600 / 2);  // a different seed gives a different sequence
  // Different ranks under '*' and different points get different draws too.
  int rank_differ = 0, point_differ = 0;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    if (a.delay(0, seq, InjectPoint::kReduceScatter, 0) !=
        a.delay(1, seq, InjectPoint::kReduceScatter, 0)) {
      ++rank_differ;
    }
    if (a.delay(0, seq, InjectPoint::kReduceScatter, 0) !=
        a.delay(0, seq, InjectPoint::kAllgather, 0)) {
      ++point_differ;
    }
  }
  EXPECT_GT(rank_differ, 100);
  EXPECT_GT(point_differ, 100);
}

// Pins the hash: the same coin flips must come out in every build and process, so that recorded
// experiments stay reproducible. (Integer-only path: no libm involved.)
TEST(InjectDelay, CoinSequenceIsStable) {
  const InjectPlan plan = parse_ok("rank=3,delay=1ms,prob=0.5,seed=1234");
  uint64_t mask = 0;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    if (plan.delay(3, seq, InjectPoint::kReduceScatter, 2) > 0) mask |= uint64_t{1} << seq;
  }
  EXPECT_EQ(mask, 0xb520559df86cdce8ull) << std::hex << mask;
}

}  // namespace
}  // namespace skipring
