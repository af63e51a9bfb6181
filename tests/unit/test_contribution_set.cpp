// ContributionSet: membership, overlap, merge, wire round trip, corrupt input.
#include <gtest/gtest.h>

#include "collectives/contribution_set.h"

namespace skipring {
namespace {

TEST(ContributionSet, AddOverlapMerge) {
  for (int n : {1, 3, 63, 64, 65, 130}) {
    ContributionSet a(n), b(n);
    EXPECT_TRUE(a.empty());
    a.add(0);
    b.add(n - 1);
    EXPECT_EQ(a.overlaps(b), n == 1);
    if (n > 1) {
      a.merge(b);
      EXPECT_EQ(a.count(), 2);
      EXPECT_TRUE(a.contains(n - 1));
      EXPECT_TRUE(a.overlaps(b));
    }
    ContributionSet full(n);
    for (int r = 0; r < n; ++r) full.add(r);
    EXPECT_TRUE(full.full());
    EXPECT_FALSE(full.contains(n));
    EXPECT_FALSE(full.contains(-1));
  }
}

TEST(ContributionSet, WireRoundTripAndCorruption) {
  ContributionSet a(70);
  a.add(1);
  a.add(69);
  std::vector<uint64_t> w(a.words());
  a.write_words(w.data());
  ContributionSet b;
  ASSERT_TRUE(b.read_words(70, w.data()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.to_string(), "{1,69}");
  w[1] |= uint64_t{1} << 10;  // rank 74 does not exist
  EXPECT_FALSE(b.read_words(70, w.data()));
}

}  // namespace
}  // namespace skipring
