// Driver calls the allocator makes, counted by the stand-in driver's call
// log: none on the fast path, and the documented number per stitch (one
// cuMemMap per page, each page being its own allocation; one
// cuMemSetAccess per run of adjacent pages; no cuMemUnmap: the pages stay
// mapped where they were too). ctest runs these as fakecuda.DriverCalls.*;
// on sim they skip.
#include <gtest/gtest.h>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

const fakecuda_controls* require_stand_in() {
  const fakecuda_controls* fake = stand_in();
  if (fake == nullptr && cuda_expected()) {
    ADD_FAILURE() << "STRATA_TEST_CUDA_DRIVER is set, but the stand-in is not loaded";
  }
  return cuda_expected() ? fake : nullptr;
}

TEST(DriverCalls, CachedAllocationsAndFreesMakeNoDriverCall) {
  const fakecuda_controls* fake = require_stand_in();
  if (fake == nullptr) GTEST_SKIP() << "needs the stand-in driver's call log (fakecuda.*)";
  auto two = make_two_stream_allocator("sim:capacity=64MiB");
  ASSERT_NE(two.alloc, nullptr);
  caching_allocator& a = *two.alloc;
  void* const s = two.streams[0];
  // Warm: one small class and one large size on a created stream.
  for (int i = 0; i < 2; ++i) {
    auto small = a.malloc_async(4096, s);
    auto large = a.malloc_async(8 * mib, s);
    ASSERT_TRUE(small.ok() && large.ok());
    ASSERT_TRUE(a.free_async(*small, s).ok());
    ASSERT_TRUE(a.free_async(*large, s).ok());
  }
  fake->reset_calls();
  for (int i = 0; i < 1000; ++i) {
    auto small = a.malloc_async(4096, s);
    auto large = a.malloc_async(8 * mib, s);
    ASSERT_TRUE(small.ok() && large.ok());
    ASSERT_TRUE(a.free_async(*small, s).ok());
    ASSERT_TRUE(a.free_async(*large, s).ok());
  }
  EXPECT_EQ(fake->call_count(nullptr), 0u) << fake->recent_calls(20);
}

TEST(DriverCalls, AStitchMapsEachPageAndSetsAccessOncePerRun) {
  const fakecuda_controls* fake = require_stand_in();
  if (fake == nullptr) GTEST_SKIP() << "needs the stand-in driver's call log (fakecuda.*)";
  auto a = make_allocator("sim:capacity=16MiB");
  ASSERT_NE(a, nullptr);
  void* blocks[4] = {};
  for (void*& p : blocks) {
    auto made = a->malloc_async(4 * mib, nullptr);
    ASSERT_TRUE(made.ok()) << made.error().to_string();
    p = *made;
  }
  // Holes of two idle pages each at 4 MiB and 12 MiB; the device is full.
  ASSERT_TRUE(a->free_async(blocks[1], nullptr).ok());
  ASSERT_TRUE(a->free_async(blocks[3], nullptr).ok());
  fake->reset_calls();
  // Fits only at 12 MiB, where two pages are mapped and two are missing:
  // the two idle pages of the other hole are mapped there too.
  auto big = a->malloc_async(8 * mib, nullptr);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  EXPECT_EQ(stat_of(*a, "num_stitches"), 1);
  EXPECT_EQ(fake->call_count("cuMemUnmap"), 0u) << fake->recent_calls(30);
  EXPECT_EQ(fake->call_count("cuMemMap"), 2u) << fake->recent_calls(30);
  EXPECT_EQ(fake->call_count("cuMemSetAccess"), 1u) << fake->recent_calls(30);
  EXPECT_EQ(fake->call_count("cuMemCreate"), 0u) << fake->recent_calls(30);
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), static_cast<std::int64_t>(16 * mib));
  fill(*big, 8 * mib, 3);
  EXPECT_TRUE(holds(*big, 8 * mib, 3));
  for (void* p : {blocks[0], blocks[2], *big}) ASSERT_TRUE(a->free_async(p, nullptr).ok());
}

}  // namespace
}  // namespace strata::testing
