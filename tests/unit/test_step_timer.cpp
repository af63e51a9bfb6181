// StepTimer: robust per-neighbour median, sliding window, fallbacks, transfer fit, threshold.
#include <gtest/gtest.h>

#include <cstddef>
#include <limits>

#include "straggler/step_timer.h"

namespace skipring {
namespace {

TEST(StepTimer, FallbackWithFewerThanThreeObservations) {
  StepTimer t;
  EXPECT_DOUBLE_EQ(t.typical(1, 0.5), 0.5);
  // One or two observations: the longest, but never above the fallback (the prior).
  t.observe(1, 0.001, 1024);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.5), 0.001);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.0005), 0.0005);
  t.observe(1, 0.002, 1024);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.5), 0.002);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.0012), 0.0012);
  EXPECT_DOUBLE_EQ(t.transfer(1024, 0.25), 0.25);
  t.observe(1, 0.003, 1024);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.5), 0.002);
  // From three on the median alone, above the fallback too.
  EXPECT_DOUBLE_EQ(t.typical(1, 0.0005), 0.002);
  // Other neighbours are tracked separately.
  EXPECT_DOUBLE_EQ(t.typical(2, 0.5), 0.5);
  EXPECT_EQ(t.count(1), 3);
  EXPECT_EQ(t.count(2), 0);
}

TEST(StepTimer, MedianIgnoresSingleHugeOutlier) {
  StepTimer t(16);
  for (int i = 0; i < 15; ++i) t.observe(3, 0.001 + 1e-6 * (i % 3), 4096);
  t.observe(3, 5.0, 4096);  // one straggler step
  const double typical = t.typical(3, -1);
  EXPECT_GE(typical, 0.001);
  EXPECT_LE(typical, 0.001002);
}

TEST(StepTimer, MedianOfEvenCountAveragesMiddlePair) {
  StepTimer t(8);
  for (double v : {4.0, 1.0, 3.0, 2.0}) t.observe(0, v, 1);
  EXPECT_DOUBLE_EQ(t.typical(0, -1), 2.5);
}

TEST(StepTimer, WindowSlides) {
  StepTimer t(4);
  EXPECT_EQ(t.window(), 4);
  for (int i = 0; i < 4; ++i) t.observe(7, 1.0, 100);
  EXPECT_DOUBLE_EQ(t.typical(7, -1), 1.0);
  for (int i = 0; i < 3; ++i) t.observe(7, 9.0, 100);
  EXPECT_EQ(t.count(7), 4);
  EXPECT_DOUBLE_EQ(t.typical(7, -1), 9.0);  // 1, 9, 9, 9
  t.observe(7, 9.0, 100);
  EXPECT_DOUBLE_EQ(t.typical(7, -1), 9.0);  // the old 1.0 has left the window
  t.observe(7, 2.0, 100);
  t.observe(7, 2.0, 100);
  EXPECT_DOUBLE_EQ(t.typical(7, -1), 5.5);  // 9, 9, 2, 2
}

TEST(StepTimer, WindowBelowThreeIsRaised) {
  StepTimer t(1);
  EXPECT_EQ(t.window(), 3);
  for (int i = 0; i < 3; ++i) t.observe(0, 1.0, 1);
  EXPECT_DOUBLE_EQ(t.typical(0, -1), 1.0);
}

TEST(StepTimer, NegativeAndNonFiniteObservations) {
  StepTimer t;
  t.observe(0, -1.0, 8);
  t.observe(0, std::numeric_limits<double>::infinity(), 8);
  t.observe(0, std::numeric_limits<double>::quiet_NaN(), 8);
  EXPECT_EQ(t.count(0), 1);
  t.observe(0, 0.0, 8);
  t.observe(0, 0.0, 8);
  EXPECT_DOUBLE_EQ(t.typical(0, -1), 0.0);
}

TEST(StepTimer, TransferFitRecoversLatencyAndBandwidth) {
  const double latency = 20e-6;   // 20 us
  const double bandwidth = 10e9;  // 10 GB/s
  StepTimer t(32);
  // Two neighbours, sizes from 4 KiB to 4 MiB, +-1 % deterministic noise.
  for (int i = 0; i < 64; ++i) {
    const size_t bytes = size_t{4096} << (i % 11);
    const double noise = 1.0 + 0.01 * ((i % 5) - 2) / 2.0;
    t.observe(i % 2, (latency + bytes / bandwidth) * noise, bytes);
  }
  for (size_t bytes : {size_t{8192}, size_t{1} << 20, size_t{3} << 20}) {
    const double expected = latency + bytes / bandwidth;
    EXPECT_NEAR(t.transfer(bytes, -1), expected, 0.05 * expected) << bytes;
  }
  // Latency alone (the intercept) within 5 %.
  EXPECT_NEAR(t.transfer(0, -1), latency, 0.05 * latency);
}

TEST(StepTimer, TransferFitTrimsStragglerWaits) {
  const double latency = 50e-6;
  const double bandwidth = 5e9;
  StepTimer t(16);
  for (int i = 0; i < 60; ++i) {
    const size_t bytes = size_t{65536} * (1 + i % 8);
    double s = latency + bytes / bandwidth;
    if (i % 13 == 5) s += 0.2;  // a straggler step: 200 ms late
    t.observe(1, s, bytes);
  }
  for (size_t bytes : {size_t{65536}, size_t{524288}}) {
    const double expected = latency + bytes / bandwidth;
    EXPECT_NEAR(t.transfer(bytes, -1), expected, 0.05 * expected) << bytes;
  }
}

TEST(StepTimer, TransferSingleSizeScalesMedian) {
  StepTimer t;
  for (int i = 0; i < 10; ++i) t.observe(0, 0.002, 1000);
  t.observe(0, 1.0, 1000);  // outlier
  EXPECT_DOUBLE_EQ(t.transfer(1000, -1), 0.002);
  EXPECT_DOUBLE_EQ(t.transfer(500, -1), 0.001);
}

TEST(StepTimer, TransferFloorsAtZero) {
  StepTimer t;
  // Times decrease with size: nonsense slope, answered with a non-negative constant.
  t.observe(0, 0.003, 100);
  t.observe(0, 0.002, 200);
  t.observe(0, 0.001, 300);
  EXPECT_GE(t.transfer(1000000, -1), 0.0);
  EXPECT_GE(t.transfer(0, -1), 0.0);
}

// Thresholds as Communicator::skip_threshold asks for them (T learnt or given, T_trans fitted or
// given, the link floor, the minimum wait).
ThresholdParams threshold_params(double alpha, double min_wait_s, double fallback_T_s,
                                 double fallback_bytes_per_s) {
  ThresholdParams p;
  p.alpha = alpha;
  p.min_wait_s = min_wait_s;
  p.fallback_T_s = fallback_T_s;
  p.fallback_bytes_per_s = fallback_bytes_per_s;
  return p;
}

TEST(StepTimer, ThresholdFormulaAndFloor) {
  StepTimer t;
  // Fallbacks only: 2 * 0.01 + 4096 bytes at 1 MB/s.
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, threshold_params(2.0, 0.0, 0.01, 1e6)),
                   2.0 * 0.01 + 4096 / 1e6);
  // Floor.
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, threshold_params(2.0, 0.5, 0.01, 1e6)), 0.5);
  // Observed: T = median 0.004, transfer of a single size = median 0.004.
  for (int i = 0; i < 5; ++i) t.observe(1, 0.004, 4096);
  EXPECT_DOUBLE_EQ(t.typical(1, -1), 0.004);
  EXPECT_DOUBLE_EQ(t.transfer(4096, -1), 0.004);
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, threshold_params(3.0, 0.0, 1.0, 1.0)), 3.0 * 0.004 + 0.004);
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, threshold_params(3.0, 1.0, 1.0, 1.0)), 1.0);
  // Neighbour without observations uses fallback_T but the shared transfer fit.
  EXPECT_DOUBLE_EQ(t.threshold(9, 4096, threshold_params(3.0, 0.0, 0.1, 1.0)), 3.0 * 0.1 + 0.004);
}

TEST(StepTimer, ThresholdGivenTAndLinkFloor) {
  StepTimer t;
  for (int i = 0; i < 5; ++i) t.observe(1, 0.004, 4096);
  ThresholdParams p = threshold_params(2.0, 0.0, 1e-3, 1e9);
  // T and T_trans given (SKIPRING_SKIP_T_US, SKIPRING_SKIP_TTRANS_US): the observations are
  // not used.
  p.fixed_T_s = 0.02;
  p.fixed_trans_s = 0.001;
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.02 + 0.001);
  // A learnt T is never below the link's time for the pieces in flight, observed or not.
  p.fixed_T_s = 0;
  p.link_s = 0.01;
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.01 + 0.001);
  EXPECT_DOUBLE_EQ(t.threshold(9, 4096, p), 2.0 * 0.01 + 0.001);
  // Below the observations the observed median wins; without them the fallback T (1 ms).
  p.link_s = 0.001;
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.004 + 0.001);
  p.link_s = 0;
  EXPECT_DOUBLE_EQ(t.threshold(9, 4096, p), 2.0 * 1e-3 + 0.001);
}

TEST(StepTimer, NeighbourSeenBehindGetsTheBehindPrior) {
  StepTimer t;
  ThresholdParams p = threshold_params(2.0, 0.0, 0.05, 1e9);
  p.fixed_trans_s = 0.001;
  p.behind_T_s = 0.002;
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.05 + 0.001);  // the prior
  t.observe_behind(1);
  EXPECT_TRUE(t.seen_behind(1));
  EXPECT_FALSE(t.seen_behind(2));
  EXPECT_EQ(t.count(1), 0);
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.002 + 0.001);  // seen behind only
  EXPECT_DOUBLE_EQ(t.threshold(2, 4096, p), 2.0 * 0.05 + 0.001);   // other neighbours not
  // Never below the link floor.
  p.link_s = 0.003;
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.003 + 0.001);
  p.link_s = 0;
  // Once observed, the observations (capped by the prior while fewer than 3) again.
  t.observe(1, 0.01, 4096);
  EXPECT_DOUBLE_EQ(t.threshold(1, 4096, p), 2.0 * 0.01 + 0.001);
  t.reset();
  EXPECT_FALSE(t.seen_behind(1));
}

TEST(StepTimer, ResetForgetsEverything) {
  StepTimer t;
  for (int i = 0; i < 5; ++i) t.observe(1, 0.004, 4096);
  t.reset();
  EXPECT_EQ(t.count(1), 0);
  EXPECT_DOUBLE_EQ(t.typical(1, 0.7), 0.7);
  EXPECT_DOUBLE_EQ(t.transfer(4096, 0.3), 0.3);
  for (int i = 0; i < 3; ++i) t.observe(1, 0.002, 4096);
  EXPECT_DOUBLE_EQ(t.typical(1, -1), 0.002);
}

}  // namespace
}  // namespace skipring
