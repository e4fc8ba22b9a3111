// How often a large arena closes its epoch with an event and queries it
// (docs/allocator.md, "Epochs"): after 8 frees, at most once a millisecond
// of the host's clock, because an event call costs about 2 us inside an
// H100 training step while the GPU runs about 12 ms behind. On a
// timing-only sim device the host's clock is modeled, so a burst of frees
// takes no time and the test can say exactly how many events it gets.
#include <gtest/gtest.h>

#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::unique_ptr<caching_allocator> timing_only_allocator() {
  auto dev = open_device("sim:capacity=1GiB,data=none,gpu_lag_us=12000");
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  if (!dev) return nullptr;
  auto a = caching_allocator::create(std::move(*dev), {});
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  return a ? std::move(*a) : nullptr;
}

// Moves the device's modeled host clock `seconds` ahead.
void let_time_pass(caching_allocator& a, double seconds) {
  ASSERT_TRUE(a.dev().advance_modeled_clock(a.dev().host_clock() + seconds).ok());
}

std::vector<void*> take(caching_allocator& a, std::size_t count) {
  std::vector<void*> out;
  for (std::size_t i = 0; i < count; ++i) {
    auto p = a.malloc_async(4 * mib, nullptr);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    if (p) out.push_back(*p);
  }
  return out;
}

void give_back(caching_allocator& a, const std::vector<void*>& blocks) {
  for (void* p : blocks) EXPECT_TRUE(a.free_async(p, nullptr).ok());
}

TEST(EpochEvents, ABurstOfFreesClosesOneEpochAMillisecond) {
  auto a = timing_only_allocator();
  ASSERT_TRUE(a);
  const std::vector<void*> first = take(*a, 64);
  const std::vector<void*> second = take(*a, 16);
  const std::uint64_t records = calls_of(a->dev(), driver_call::record_event);
  const std::uint64_t queries = calls_of(a->dev(), driver_call::query_event);
  give_back(*a, first);  // 64 frees in one modeled instant
  EXPECT_EQ(calls_of(a->dev(), driver_call::record_event) - records, 1U)
      << "one epoch closed for the burst, not one per 8 frees";
  EXPECT_LE(calls_of(a->dev(), driver_call::query_event) - queries, 1U);

  let_time_pass(*a, 1e-3);
  give_back(*a, second);  // a millisecond later: the next epoch closes
  EXPECT_EQ(calls_of(a->dev(), driver_call::record_event) - records, 2U);
}

}  // namespace
}  // namespace strata::testing
