// The base layer (common/): size parsing, hashing, token packing, rounding, wire phase ids.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "apps/bench_util.h"
#include "common/align.h"
#include "common/hash.h"
#include "common/phases.h"
#include "common/size_parse.h"
#include "common/token.h"

namespace skipring {
namespace {

TEST(CommonSizeParse, SuffixesOfTheRuntimeAndTheApps) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("8b"), 8u);
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("64k"), 64u << 10);
  EXPECT_EQ(parse_size("64KB"), 64u << 10);
  EXPECT_EQ(parse_size("64KiB"), 64u << 10);
  EXPECT_EQ(parse_size("64ki"), 64u << 10);
  EXPECT_EQ(parse_size("4M"), 4u << 20);
  EXPECT_EQ(parse_size("4MiB"), 4u << 20);
  EXPECT_EQ(parse_size("1g"), uint64_t{1} << 30);
  EXPECT_EQ(parse_size("2T"), uint64_t{2} << 40);
  EXPECT_EQ(parse_size("2tb"), uint64_t{2} << 40);
}

TEST(CommonSizeParse, Rejects) {
  for (const char* bad : {"", "K", "-1", "+1", " 1", "1 ", "1.5K", "1KK", "1X", "1bb", "1i", "1Kb2",
                          "18446744073709551616", "16777216T"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_size("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parse_size("16777215T"), uint64_t{16777215} << 40);
}

TEST(CommonSizeParse, TrimBlanks) {
  EXPECT_EQ(trim_blanks("  64K\t\n"), "64K");
  EXPECT_EQ(trim_blanks(" "), "");
  EXPECT_EQ(parse_size(trim_blanks(" 2M ")), 2u << 20);
}

TEST(CommonHash, KnownValues) {
  EXPECT_EQ(fnv1a64(""), kFnv1a64Offset);
  EXPECT_EQ(fnv1a64("a"), 0x44bd8ad473cd9906ULL);  // with skipring's offset basis (hash.h)
  const char bytes[] = {'a', 'b'};
  EXPECT_EQ(fnv1a64(bytes, 2), fnv1a64("ab"));
  // splitmix64's first draw from state 0.
  EXPECT_EQ(splitmix64_mix(0 + kSplitMix64Gamma), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64_mix(0), 0u);
}

TEST(CommonToken, PackUnpack) {
  for (uint32_t kind = 0; kind < kTokenKinds; ++kind) {
    for (size_t index : {size_t{0}, size_t{1}, size_t{12345}, size_t{kTokenIndexMask}}) {
      const Token t = pack_token(kind, index);
      EXPECT_EQ(token_kind_of(t), kind);
      EXPECT_EQ(token_index_of(t), index);
    }
  }
  EXPECT_EQ(kTokenKindShift, 29u);
}

TEST(CommonAlign, RoundUp) {
  EXPECT_EQ(round_up(0, 64), 0u);
  EXPECT_EQ(round_up(1, 64), 64u);
  EXPECT_EQ(round_up(64, 64), 64u);
  EXPECT_EQ(round_up(65, 8), 72u);
}

TEST(CommonPhases, DistinctAndBelowTheCount) {
  const uint8_t ids[] = {static_cast<uint8_t>(Phase::kReduceScatter),
                         static_cast<uint8_t>(Phase::kAllgather),
                         kRdPhaseRound,
                         kRdPhaseFold,
                         kRdPhaseResult,
                         kRabPhaseRs,
                         kRabPhaseAg,
                         kRsPhase,
                         kAgPhase,
                         kBcastPhase,
                         kReducePhase,
                         kTreePhaseReduce,
                         kTreePhaseBcast,
                         kHierPhaseLocalRs,
                         kHierPhaseLocalAg,
                         kLcPhaseArrive,
                         kLcPhaseDecision,
                         kLcPhaseInput,
                         kLcPhaseFinal,
                         kLcPhaseGo};
  std::set<uint8_t> seen;
  for (uint8_t id : ids) {
    EXPECT_LT(id, kNumWirePhases);
    EXPECT_TRUE(seen.insert(id).second) << int{id};
  }
  EXPECT_EQ(seen.size(), size_t{kNumWirePhases});
}

}  // namespace
}  // namespace skipring

// skipring_bench's interquartile mean (apps/bench_util.h): the latency tables' second statistic.
TEST(BenchUtil, InterquartileMeanDropsAQuarterEachSide) {
  EXPECT_EQ(skipring_bench::interquartile_mean({}), 0.0);
  EXPECT_EQ(skipring_bench::interquartile_mean({3.0}), 3.0);
  EXPECT_EQ(skipring_bench::interquartile_mean({1.0, 2.0, 3.0}), 2.0);  // n < 4: the plain mean
  // n = 8: the two lowest and two highest dropped, whatever they are.
  EXPECT_EQ(skipring_bench::interquartile_mean({0.0, 0.0, 2.0, 3.0, 4.0, 5.0, 100.0, 1e9}), 3.5);
  // Resolves below a tick: samples of 250 or 260, 5 of one and 3 of the other in the middle.
  const std::vector<double> a{240, 250, 250, 250, 250, 260, 260, 300};
  EXPECT_DOUBLE_EQ(skipring_bench::interquartile_mean(a), 252.5);
  EXPECT_EQ(skipring_bench::percentile(a, 50), 250.0);
}
