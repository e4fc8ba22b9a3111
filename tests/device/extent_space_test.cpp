// extent_space: first fit in units, merging on give, growth at the end up
// to the limit, and starts aligned beyond the unit.
#include <gtest/gtest.h>

#include "strata/extent_space.hpp"

namespace strata::testing {
namespace {

TEST(ExtentSpace, FirstFitInUnitsMergedOnGive) {
  extent_space s(4096, 0);
  EXPECT_EQ(s.take(1), 0u);
  EXPECT_EQ(s.take(5000), 4096u) << "rounded up to whole units";
  EXPECT_EQ(s.take(4096), 12288u);
  EXPECT_EQ(s.end(), 16384u);
  s.give(0, 1);
  s.give(4096, 5000);
  EXPECT_EQ(s.used(), 4096u);
  EXPECT_EQ(s.take(12288), 0u) << "the two freed ranges merged into one";
  EXPECT_EQ(s.end(), 16384u);
}

TEST(ExtentSpace, TheLimitIsNullopt) {
  extent_space s(4096, 8192);
  EXPECT_TRUE(s.take(8192).has_value());
  EXPECT_FALSE(s.take(1).has_value());
  EXPECT_FALSE(extent_space(4096, 0).take(UINT64_MAX - 100).has_value()) << "wraps around";
}

TEST(ExtentSpace, AlignedStartsLeaveTheSkippedSpaceFree) {
  extent_space s(4096, 0);
  EXPECT_EQ(s.take(4096), 0u);
  EXPECT_EQ(s.take(8192, 1 << 20), 1u << 20) << "aligned at the end of the space";
  EXPECT_EQ(s.end(), (1u << 20) + 8192);
  EXPECT_EQ(s.take(4096), 4096u) << "the skipped space is free";
  EXPECT_EQ(s.take(8192, 1 << 20), 2u << 20) << "no free range holds an aligned start";
  s.give(1 << 20, 8192);
  EXPECT_EQ(s.take(8192, 1 << 20), 1u << 20) << "a free range with an aligned start";
  EXPECT_EQ(s.used(), 4096u + 4096u + 8192u + 8192u);
  extent_space limited(4096, (1 << 20) + 4096);
  EXPECT_EQ(limited.take(4096), 0u);
  EXPECT_FALSE(limited.take(8192, 1 << 20).has_value()) << "the aligned end passes the limit";
  EXPECT_EQ(limited.end(), 4096u) << "a refused take changes nothing";
}

}  // namespace
}  // namespace strata::testing
