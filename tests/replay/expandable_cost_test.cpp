// What the models of PyTorch's allocator take from the device (growths),
// and what expandable segments' growths cost at the sim's driver prices.
#include <gtest/gtest.h>

#include "pytorch_model/pytorch_allocator.hpp"
#include "replay/expandable_cost.hpp"

namespace strata::replay {
namespace {

constexpr std::uint64_t mib = 1ULL << 20;
using growth = pytorch_allocator_model::growth;

TEST(PytorchModelGrowths, NativeTakesOneSegmentPerRequestNoFreeBlockFits) {
  pytorch_allocator_model m(pytorch_allocator_model::mode::native);
  const std::uint32_t big = m.allocate(30 * mib);  // its own size, rounded to 2 MiB
  m.allocate(5 * mib);                             // under 10 MiB: a 20 MiB segment
  m.allocate(1024);                                // small: a 2 MiB segment
  m.allocate(7 * mib);                             // fits the 20 MiB segment's rest
  m.free(big);
  m.allocate(29 * mib);  // fits the freed 30 MiB
  ASSERT_EQ(m.growths().size(), 3U);
  EXPECT_EQ(m.growths()[0].bytes, 30 * mib);
  EXPECT_EQ(m.growths()[1].bytes, 20 * mib);
  EXPECT_EQ(m.growths()[2].bytes, 2 * mib);
  for (const growth& g : m.growths()) EXPECT_EQ(g.page, 0U) << "a cudaMalloc has no pages";
  EXPECT_EQ(m.peak_reserved(), 52 * mib);
  m.forget_growths();
  EXPECT_TRUE(m.growths().empty());
  EXPECT_EQ(m.peak_reserved(), 52 * mib) << "forgetting growths keeps the reserve";
}

TEST(PytorchModelGrowths, ExpandableGrowsItsSegmentsInPages) {
  pytorch_allocator_model m(pytorch_allocator_model::mode::expandable);
  const std::uint32_t a = m.allocate(30 * mib);  // 40 MiB: two 20 MiB pages
  m.allocate(1024);                              // the small pool's first 2 MiB page
  m.allocate(15 * mib);                          // the 10 MiB left at the end grows by a page
  m.free(a);
  m.allocate(30 * mib);  // the freed block again: no growth
  ASSERT_EQ(m.growths().size(), 3U);
  EXPECT_EQ(m.growths()[0].bytes, 40 * mib);
  EXPECT_EQ(m.growths()[0].page, 20 * mib);
  EXPECT_EQ(m.growths()[1].bytes, 2 * mib);
  EXPECT_EQ(m.growths()[1].page, 2 * mib);
  EXPECT_EQ(m.growths()[2].bytes, 20 * mib) << "the free 10 MiB at the end takes in one page";
  EXPECT_EQ(m.growths()[2].page, 20 * mib);
}

// At the H100 prices (docs/device.md): per 20 MiB page one create_pages
// (14 us + 9 x 0.13) and one map (2.2 us); one set_access per growth at
// 30 us per mapping in it plus 0.15 us per 2 MiB beyond the mappings.
TEST(ExpandableCost, GrowthsCostTheirCallsAtTheDevicesPrices) {
  const std::vector<growth> growths = {{40 * mib, 20 * mib}, {2 * mib, 2 * mib}};
  auto ms = expandable_map_ms("sim:data=none", growths);
  ASSERT_TRUE(ms.ok()) << ms.error().to_string();
  const double create = 2 * (14 + 9 * 0.13) + 14;
  const double map = 3 * 2.2;
  const double open = (2 * 30 + 18 * 0.15) + 30;
  EXPECT_NEAR(*ms, (create + map + open) * 1e-3, 1e-6);

  auto free_calls = expandable_map_ms("sim:data=none,driver_costs=none", growths);
  ASSERT_TRUE(free_calls.ok()) << free_calls.error().to_string();
  EXPECT_EQ(*free_calls, 0.0);
  auto nothing = expandable_map_ms("sim:data=none", {});
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(*nothing, 0.0);
}

TEST(ExpandableCost, WhatCannotBeMadeIsAClearError) {
  auto too_much = expandable_map_ms("sim:data=none,capacity=32MiB", {{40 * mib, 20 * mib}});
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.error().code(), errc::out_of_memory) << too_much.error().to_string();

  auto odd_page = expandable_map_ms("sim:data=none,granularity=4MiB", {{6 * mib, 2 * mib}});
  ASSERT_FALSE(odd_page.ok());
  EXPECT_EQ(odd_page.error().code(), errc::invalid_argument);
  EXPECT_NE(odd_page.error().message().find("not whole pages"), std::string::npos)
      << odd_page.error().message();

  auto bad_device = expandable_map_ms("nonsense", {{20 * mib, 20 * mib}});
  EXPECT_FALSE(bad_device.ok());
}

}  // namespace
}  // namespace strata::replay
