// Page runs (`page_run_size`): new pages are created in physical runs of
// several pages, and a run is mapped, stitched, unmapped and released
// only whole. It costs one create, one map and one set_access however long
// it is; its idle pages serve other requests only when the whole run is
// idle. The sim refuses to unmap anything but whole earlier mappings, and
// to map a run at an offset, as the driver does.
#include <gtest/gtest.h>

#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::unique_ptr<caching_allocator> with_runs(const std::string& sim_spec, std::size_t run_bytes) {
  allocator_options o;
  o.page_run_size = run_bytes;
  return make_allocator(sim_spec, o);
}

// Growing by 64 MiB in runs of up to 16 MiB takes four runs: four creates,
// four maps, one set_access, where one-page runs take 32, 32 and 1.
TEST(PageRuns, GrowingCreatesAndMapsWholeRuns) {
  for (const std::size_t run : {std::size_t{0}, 16 * mib}) {
    auto a = with_runs("sim:capacity=256MiB", run);
    ASSERT_TRUE(a);
    auto p = a->malloc_async(64 * mib, nullptr);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    fill(*p, 64 * mib, 3);
    const std::uint64_t runs = run == 0 ? 32 : 4;
    EXPECT_EQ(calls_of(a->dev(), driver_call::create_pages), runs) << "runs of " << run;
    EXPECT_EQ(calls_of(a->dev(), driver_call::map), runs) << "runs of " << run;
    EXPECT_EQ(calls_of(a->dev(), driver_call::set_access), 1U) << "runs of " << run;
    EXPECT_EQ(stat_of(*a, "num_device_alloc"), static_cast<std::int64_t>(runs));
    EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 64 * mib);
    EXPECT_TRUE(holds(*p, 64 * mib, 3));
    ASSERT_TRUE(a->free_async(*p, nullptr).ok());
    ASSERT_TRUE(a->empty_cache().ok());
    EXPECT_EQ(stat_of(*a, "num_device_free"), static_cast<std::int64_t>(runs));
    auto info = a->dev().get_memory_info();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->free, info->total) << "a run was kept";
  }
}

// Three 16 MiB blocks, each its own run; the outer two freed. A 32 MiB
// request fits in no free range: first fit places it at the third block's
// range (mapped, and unmapped space after it), and the first block's idle
// run is stitched whole after that: one map, no create, and the middle
// block keeps its bytes.
TEST(PageRuns, AnIdleRunIsStitchedWhole) {
  auto a = with_runs("sim:capacity=48MiB", 16 * mib);
  ASSERT_TRUE(a);
  std::vector<void*> blocks;
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto p = a->malloc_async(16 * mib, nullptr);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    fill(*p, 16 * mib, i);
    blocks.push_back(*p);
  }
  ASSERT_EQ(calls_of(a->dev(), driver_call::create_pages), 3U);
  ASSERT_TRUE(a->free_async(blocks[0], nullptr).ok());
  ASSERT_TRUE(a->free_async(blocks[2], nullptr).ok());
  const std::uint64_t maps = calls_of(a->dev(), driver_call::map);
  auto big = a->malloc_async(32 * mib, nullptr);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  fill(*big, 32 * mib, 9);
  EXPECT_EQ(*big, blocks[2]);
  EXPECT_EQ(calls_of(a->dev(), driver_call::create_pages), 3U) << "the device is full";
  EXPECT_EQ(calls_of(a->dev(), driver_call::map) - maps, 1U) << "one map a run";
  EXPECT_EQ(stat_of(*a, "num_stitches"), 1);
  EXPECT_TRUE(holds(blocks[1], 16 * mib, 1));
  EXPECT_TRUE(holds(*big, 32 * mib, 9));
  ASSERT_TRUE(a->free_async(*big, nullptr).ok());
  ASSERT_TRUE(a->free_async(blocks[1], nullptr).ok());
  ASSERT_TRUE(a->empty_cache().ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0);
}

// The price of runs: a run with a live page cannot move, so its idle pages
// do not back a request elsewhere. A 16 MiB block (one run) is freed and a
// 4 MiB one placed at its start, leaving 12 MiB idle in the run, walled in
// by a 2 MiB block after it. A 24 MiB request goes after the wall: with
// one-page runs it stitches the 6 idle pages and creates 6 (30 MiB
// reserved in all); with 16 MiB runs it creates all 12 (42 MiB).
TEST(PageRuns, APartlyLiveRunDoesNotMove) {
  for (const std::size_t run : {std::size_t{0}, 16 * mib}) {
    auto a = with_runs("sim:capacity=256MiB", run);
    ASSERT_TRUE(a);
    auto first = a->malloc_async(16 * mib, nullptr);
    auto wall = a->malloc_async(2 * mib, nullptr);
    ASSERT_TRUE(first.ok() && wall.ok());
    ASSERT_TRUE(a->free_async(*first, nullptr).ok());
    auto small = a->malloc_async(4 * mib, nullptr);
    ASSERT_TRUE(small.ok());
    ASSERT_EQ(*small, *first) << "first fit reuses the mapped range";
    fill(*small, 4 * mib, 4);
    auto big = a->malloc_async(24 * mib, nullptr);
    ASSERT_TRUE(big.ok()) << big.error().to_string();
    fill(*big, 24 * mib, 5);
    EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"),
              static_cast<std::int64_t>(run == 0 ? 30 * mib : 42 * mib))
        << "runs of " << run;
    EXPECT_EQ(stat_of(*a, "num_stitches"), run == 0 ? 1 : 0) << "runs of " << run;
    EXPECT_TRUE(holds(*small, 4 * mib, 4));
    EXPECT_TRUE(holds(*big, 24 * mib, 5));
    for (void* p : {*big, *small, *wall}) ASSERT_TRUE(a->free_async(p, nullptr).ok());
    ASSERT_TRUE(a->empty_cache().ok());
    EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0) << "runs of " << run;
  }
}

// A map that fails in the middle of a stitch of whole runs: the request
// fails with the device's error, every run stays held and recorded, and
// the same request then succeeds from the same runs.
TEST(PageRuns, AFailedMapDuringAStitchLosesNothing) {
  auto a = with_runs("sim:capacity=64MiB", 8 * mib);
  ASSERT_TRUE(a);
  std::vector<void*> all;
  for (std::uint32_t i = 0; i < 8; ++i) {
    auto p = a->malloc_async(8 * mib, nullptr);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    fill(*p, 8 * mib, i);
    all.push_back(*p);
  }
  ASSERT_EQ(stat_of(*a, "num_device_alloc"), 8);
  for (std::size_t i = 1; i < all.size(); i += 2) ASSERT_TRUE(a->free_async(all[i], nullptr).ok());
  const errc injected = fail_map_after(a->dev(), 2);  // the third run's map fails
  auto big = a->malloc_async(32 * mib, nullptr);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.code(), injected) << big.error().to_string();
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 64 * mib) << "a run was lost";
  EXPECT_EQ(stat_of(*a, "num_device_alloc"), 8);
  for (std::size_t i = 0; i < all.size(); i += 2) {
    EXPECT_TRUE(holds(all[i], 8 * mib, static_cast<std::uint32_t>(i))) << "block " << i;
  }
  auto again = a->malloc_async(32 * mib, nullptr);
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  fill(*again, 32 * mib, 77);
  EXPECT_EQ(stat_of(*a, "num_device_alloc"), 8) << "the same runs back the request";
  for (std::size_t i = 0; i < all.size(); i += 2) {
    EXPECT_TRUE(holds(all[i], 8 * mib, static_cast<std::uint32_t>(i))) << "block " << i;
    ASSERT_TRUE(a->free_async(all[i], nullptr).ok());
  }
  ASSERT_TRUE(a->free_async(*again, nullptr).ok());
  ASSERT_TRUE(a->empty_cache().ok());
  auto info = a->dev().get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total) << "a run was lost";
}

// A run is created within the limit: at 40 MiB of 64 with 16 MiB runs, a
// 24 MiB request gets a 16 MiB run and an 8 MiB one, and nothing beyond.
TEST(PageRuns, RunsStayWithinTheLimit) {
  allocator_options o;
  o.page_run_size = 16 * mib;
  o.memory_fraction = 0.625;  // 40 MiB of 64
  auto a = make_allocator("sim:capacity=64MiB", o);
  ASSERT_TRUE(a);
  auto p = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  auto q = a->malloc_async(24 * mib, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 40 * mib);
  auto r = a->malloc_async(2 * mib, nullptr);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::out_of_memory);
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 40 * mib);
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
}

}  // namespace
}  // namespace strata::testing
