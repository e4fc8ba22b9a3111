// Stitching: free pages in holes anywhere back a request that no contiguous
// free range can hold. Each scenario is one where a best-fit caching
// allocator without page remapping (PyTorch without expandable segments)
// runs out of memory on a device of this size, and Strata must not.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

struct live_block {
  void* p;
  std::size_t n;
  std::uint32_t seed;
};

void verify_all(const std::vector<live_block>& blocks) {
  for (const live_block& b : blocks) {
    EXPECT_TRUE(holds(b.p, std::min<std::size_t>(b.n, 8192), b.seed)) << "a live block moved";
  }
}

// 16 x 4 MiB fill a 64 MiB device; freeing every other one leaves 32 MiB in
// 4 MiB holes. A 16 MiB request fits in no hole and the device is full.
TEST(Defrag, InterleavedHolesServeALargerRequest) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  std::vector<live_block> kept;
  std::vector<void*> all;
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto p = a->malloc_async(4 * mib, nullptr);
    ASSERT_TRUE(p.ok()) << i;
    fill(*p, 8192, i);
    all.push_back(*p);
    if (i % 2 == 0) kept.push_back({*p, 4 * mib, i});
  }
  for (std::size_t i = 1; i < all.size(); i += 2) ASSERT_TRUE(a->free_async(all[i], nullptr).ok());
  auto big = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  fill(*big, 16 * mib, 99);
  EXPECT_TRUE(holds(*big, 16 * mib, 99));
  verify_all(kept);
  EXPECT_GE(stat_of(*a, "num_stitches"), 1);
  // The last hole adjoins the unmapped tail of the arena, so the request
  // starts there and reuses its 4 MiB of mapped pages: 12 MiB move.
  EXPECT_EQ(stat_of(*a, "stitched_bytes"), 12 * mib);
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 64 * mib) << "no page was created";
  // Another 16 MiB takes the remaining holes.
  auto big2 = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(big2.ok()) << big2.error().to_string();
  verify_all(kept);
}

// Training repeats its requests every step. A step that needed a stitch
// keeps the stitched mapping (and the holes' own), so the next identical
// step finds every range mapped: no driver call, no new page, bytes intact.
TEST(Defrag, ARepeatedStepStitchesOnceThenMakesNoDriverCall) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto keep = a->malloc_async(8 * mib, nullptr);  // a parameter, live throughout
  ASSERT_TRUE(keep.ok());
  fill(*keep, 8 * mib, 7);
  std::uint64_t calls_before = 0;
  for (int step = 0; step < 4; ++step) {
    const std::uint64_t start = memory_calls(a->dev());
    std::vector<void*> acts;
    for (int i = 0; i < 12; ++i) {  // activations: 48 MiB, the device is full
      auto p = a->malloc_async(4 * mib, nullptr);
      ASSERT_TRUE(p.ok()) << "step " << step << ": " << p.error().to_string();
      acts.push_back(*p);
    }
    for (int i = 0; i < 12; i += 2) ASSERT_TRUE(a->free_async(acts[i], nullptr).ok());
    auto logits = a->malloc_async(16 * mib, nullptr);  // fits in no hole
    ASSERT_TRUE(logits.ok()) << "step " << step << ": " << logits.error().to_string();
    fill(*logits, 16 * mib, static_cast<unsigned char>(step));
    EXPECT_TRUE(holds(*logits, 16 * mib, static_cast<unsigned char>(step)));
    ASSERT_TRUE(a->free_async(*logits, nullptr).ok());
    for (int i = 1; i < 12; i += 2) ASSERT_TRUE(a->free_async(acts[i], nullptr).ok());
    const std::uint64_t calls = memory_calls(a->dev()) - start;
    if (step == 0) {
      EXPECT_GT(calls, 0U) << "the first step creates and stitches";
      calls_before = stat_of(*a, "num_stitches");
      EXPECT_GE(calls_before, 1U);
    } else {
      EXPECT_EQ(calls, 0U) << "step " << step << " repeats the first";
      EXPECT_EQ(static_cast<std::uint64_t>(stat_of(*a, "num_stitches")), calls_before);
    }
    EXPECT_EQ(stat_of(*a, "reserved_bytes.all.peak"), static_cast<std::int64_t>(56 * mib))
        << "the peak of live bytes: no page more";
  }
  EXPECT_TRUE(holds(*keep, 8 * mib, 7));
  ASSERT_TRUE(a->free_async(*keep, nullptr).ok());
}

// The large arena asks for eight devices' worth of address space, to keep
// stitched mappings; a device that cannot give that much (the sim refuses
// more than 64 TiB at once, as a host or GPU with less address space would)
// gets the arena at half, and so on down to one device's worth.
TEST(Defrag, AnArenaTakesLessAddressSpaceWhereTheDeviceHasLess) {
  auto a = make_allocator("sim:capacity=16TiB,data=none");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(64 * mib, nullptr);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
}

// Small objects stay live while every large block is freed: they sit in
// their own slab pages, so they pin no large range.
TEST(Defrag, SmallBlocksPinNoLargeRange) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  std::vector<void*> large;
  std::vector<live_block> small;
  for (std::uint32_t i = 0; i < 24; ++i) {
    auto l = a->malloc_async(2 * mib + 4096, nullptr);
    ASSERT_TRUE(l.ok()) << i;
    large.push_back(*l);
    auto s = a->malloc_async(4096, nullptr);
    ASSERT_TRUE(s.ok());
    fill(*s, 4096, i);
    small.push_back({*s, 4096, i});
  }
  for (void* p : large) ASSERT_TRUE(a->free_async(p, nullptr).ok());
  auto big = a->malloc_async(56 * mib, nullptr);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  verify_all(small);
  ASSERT_TRUE(a->free_async(*big, nullptr).ok());
}

// Forward pass: activations of growing size, all live; backward: they die
// in reverse order in pairs while gradients larger than any hole appear.
TEST(Defrag, PhaseChangeRequestLargerThanAnyHole) {
  auto a = make_allocator("sim:capacity=96MiB");
  ASSERT_TRUE(a);
  std::vector<live_block> acts;
  std::size_t total = 0;
  for (std::uint32_t i = 0; total + (2 + i % 4) * mib <= 88 * mib; ++i) {
    const std::size_t n = (2 + i % 4) * mib;
    auto p = a->malloc_async(n, nullptr);
    ASSERT_TRUE(p.ok()) << i;
    fill(*p, 8192, i);
    acts.push_back({*p, n, i});
    total += n;
  }
  // Free every other activation: the holes are 2-5 MiB each.
  std::vector<live_block> kept;
  std::size_t freed = 0;
  for (std::size_t i = 0; i < acts.size(); ++i) {
    if (i % 2 == 1) {
      ASSERT_TRUE(a->free_async(acts[i].p, nullptr).ok());
      freed += acts[i].n;
    } else {
      kept.push_back(acts[i]);
    }
  }
  ASSERT_GE(freed, 24 * mib);
  auto grad = a->malloc_async(24 * mib, nullptr);
  ASSERT_TRUE(grad.ok()) << grad.error().to_string();
  fill(*grad, 24 * mib, 7);
  verify_all(kept);
  EXPECT_TRUE(holds(*grad, 24 * mib, 7));
}

// A map that fails in the middle of a stitch: the request fails with the
// device's error, no page is lost, and the allocator goes on working.
TEST(Defrag, FailedMapDuringAStitchLosesNothing) {
  auto dev = open_test_device("sim:capacity=64MiB");
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  device& d = **dev;
  auto made = caching_allocator::create(std::move(*dev), {});
  ASSERT_TRUE(made.ok());
  caching_allocator& a = **made;
  std::vector<live_block> kept;
  std::vector<void*> all;
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto p = a.malloc_async(4 * mib, nullptr);
    ASSERT_TRUE(p.ok());
    fill(*p, 8192, i);
    all.push_back(*p);
    if (i % 2 == 0) kept.push_back({*p, 4 * mib, i});
  }
  for (std::size_t i = 1; i < all.size(); i += 2) ASSERT_TRUE(a.free_async(all[i], nullptr).ok());
  const errc injected = fail_map_after(d, 3);  // the 4th map of the stitch fails
  auto big = a.malloc_async(16 * mib, nullptr);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.code(), injected) << big.error().to_string();
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 64 * mib) << "a page was lost";
  EXPECT_EQ(stat_of(a, "num_device_alloc"), 32);
  verify_all(kept);
  auto again = a.malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  fill(*again, 16 * mib, 5);
  verify_all(kept);
  ASSERT_TRUE(a.free_async(*again, nullptr).ok());
  for (const live_block& b : kept) ASSERT_TRUE(a.free_async(b.p, nullptr).ok());
  ASSERT_TRUE(a.empty_cache().ok());
  auto info = a.dev().get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total) << "a page was lost";
}

// The bound: reserved memory only grows when no idle page exists anywhere,
// so every reserved page then overlaps a live block. Hence at every
// allocation, reserved <= max over time so far of
//   sum over live blocks of (size rounded up to whole pages + one page),
// the extra page being the one a block may share at an unaligned edge.
// Randomized, single stream, blocks above the slab limit; seed printed on
// failure.
TEST(Defrag, ReservedStaysWithinLiveBytesPlusEdgePages) {
  const std::uint32_t seed = 20261122;
  auto a = make_allocator("sim:capacity=512MiB");
  ASSERT_TRUE(a);
  const std::size_t g = a->dev().granularity();
  std::mt19937_64 rng(seed);
  std::vector<live_block> live;
  std::size_t bound = 0;
  std::size_t max_bound = 0;
  for (int step = 0; step < 20000; ++step) {
    // Live bytes stay under 320 MiB, so nothing fails for lack of memory.
    if (live.empty() || (bound < 320 * mib && rng() % 100 < 55)) {
      const std::size_t n = mib + 1 + rng() % (24 * mib);
      auto p = a->malloc_async(n, nullptr);
      ASSERT_TRUE(p.ok()) << "seed " << seed << " step " << step << ": " << p.error().to_string();
      live.push_back({*p, n, static_cast<std::uint32_t>(step)});
      bound += (n + g - 1) / g * g + g;
      max_bound = std::max(max_bound, bound);
      const auto reserved = static_cast<std::size_t>(stat_of(*a, "reserved_bytes.all.current"));
      ASSERT_LE(reserved, max_bound) << "seed " << seed << " step " << step;
    } else {
      const std::size_t k = rng() % live.size();
      ASSERT_TRUE(a->free_async(live[k].p, nullptr).ok()) << "seed " << seed;
      bound -= (live[k].n + g - 1) / g * g + g;
      live[k] = live.back();
      live.pop_back();
    }
  }
  EXPECT_LE(static_cast<std::size_t>(stat_of(*a, "reserved_bytes.all.peak")), max_bound)
      << "seed " << seed;
  EXPECT_GT(stat_of(*a, "num_stitches"), 0) << "seed " << seed;
}

// Three streams stitch, repair and reuse each other's pages (frees on the
// own stream, on another one, after record_stream), with block edges
// anywhere in a page, so segments shorter than a page pile up on shared
// edge pages. Every live block must keep its bytes.
// With larger page runs (the second instantiation), whole runs are
// stitched, repaired and unmapped; the sim refuses any unmap that is not
// of whole earlier mappings.
class ThreeStreams : public ::testing::TestWithParam<std::tuple<std::uint32_t, std::uint64_t>> {};

TEST_P(ThreeStreams, StitchingKeepsEveryBlocksBytes) {
  const auto [seed, run_bytes] = GetParam();
  std::printf("seed %u, page runs of up to %llu bytes\n", seed,
              static_cast<unsigned long long>(run_bytes));
  allocator_options options;
  options.page_run_size = run_bytes;
  auto two = make_two_stream_allocator("sim:capacity=512MiB", options);
  ASSERT_TRUE(two.alloc);
  caching_allocator& a = *two.alloc;
  const std::array<void*, 3> streams{nullptr, two.streams[0], two.streams[1]};
  struct block {
    void* p;
    std::size_t n;
    void* stream;
    std::uint64_t seed;
  };
  std::mt19937_64 rng(seed);
  std::vector<block> live;
  for (int step = 0; step < 6000; ++step) {
    if (live.empty() || (live.size() < 64 && rng() % 100 < 55)) {
      // Large-arena sizes from 512 KiB to 8 MiB, edges anywhere in a page.
      const std::size_t n = 512 * 1024 + 1 + rng() % (8 * mib);
      void* s = streams[rng() % 3];
      auto p = a.malloc_async(n, s);
      ASSERT_TRUE(p.ok()) << "seed " << seed << " step " << step << ": " << p.error().to_string();
      stamp(*p, n, static_cast<std::uint64_t>(step));
      live.push_back({*p, n, s, static_cast<std::uint64_t>(step)});
    } else {
      const std::size_t k = rng() % live.size();
      const block b = live[k];
      ASSERT_TRUE(stamped(b.p, b.n, b.seed)) << "seed " << seed << " step " << step;
      const unsigned how = rng() % 4;
      if (how == 0) {
        ASSERT_TRUE(a.record_stream(b.p, streams[1 + rng() % 2]).ok());
      }
      void* on = how == 1 ? streams[rng() % 3] : b.stream;
      ASSERT_TRUE(a.free_async(b.p, on).ok()) << "seed " << seed << " step " << step;
      live[k] = live.back();
      live.pop_back();
    }
    if (step % 1000 == 999) {
      ASSERT_TRUE(a.empty_cache().ok());  // unmaps idle pages and lifts fences
      for (const block& b : live) {
        ASSERT_TRUE(stamped(b.p, b.n, b.seed)) << "seed " << seed << " step " << step;
      }
    }
  }
  EXPECT_GT(stat_of(a, "num_stitches"), 0) << "seed " << seed;
  for (const block& b : live) ASSERT_TRUE(a.free_async(b.p, b.stream).ok());
  ASSERT_TRUE(a.empty_cache().ok());
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 0) << "seed " << seed << ": a page was kept";
}

INSTANTIATE_TEST_SUITE_P(Defrag, ThreeStreams,
                         ::testing::Combine(::testing::Values(20261126U, 7U, 424242U, 99U),
                                            ::testing::Values(0U)));
INSTANTIATE_TEST_SUITE_P(PageRuns, ThreeStreams,
                         ::testing::Combine(::testing::Values(7U, 99U),
                                            ::testing::Values(8 * mib)));

}  // namespace
}  // namespace strata::testing
