// The pinned host pool: size-class runs over pinned chunks, large buffers
// as their own device allocations kept within a budget, the capacity, the
// waste on the bundled traces' size mix, and concurrent use; and the run
// heap under it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pinned_host_pool.hpp"
#include "pinned_run_heap.hpp"
#include "replay/alloc_trace.hpp"

namespace strata::testing {
namespace {

std::unique_ptr<device> sim() {
  auto d = open_device("sim:capacity=1GiB");
  EXPECT_TRUE(d.ok());
  return d ? std::move(*d) : nullptr;
}

// The pinned host calls `dev` has made: {host_alloc, host_free}.
std::pair<std::uint64_t, std::uint64_t> pinned_calls(const device& dev) {
  const driver_call_totals t = dev.call_totals();
  return {t[static_cast<std::size_t>(driver_call::host_alloc)].calls,
          t[static_cast<std::size_t>(driver_call::host_free)].calls};
}

std::unique_ptr<pinned_host_pool> make_pool(device& dev, const tier_options& o = {}) {
  auto p = pinned_host_pool::create(dev, o);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  return p ? std::move(*p) : nullptr;
}

TEST(PinnedHostPool, ServesSmallBuffersFromChunksAndLargeOnesWhole) {
  auto dev = sim();
  auto pool = make_pool(*dev, {.host_chunk = 8 << 20});
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->stats().pinned_bytes, 0u) << "nothing is pinned before it is asked for";
  std::vector<void*> held;
  for (std::size_t n : {1u, 100u, 4096u, 100000u, 200000u}) {
    auto p = pool->allocate(n);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    std::memset(*p, 0x5a, n);
    held.push_back(*p);
  }
  auto s = pool->stats();
  EXPECT_GE(s.in_use_bytes, 1u + 100 + 4096 + 100000 + 200000);
  EXPECT_GE(s.pinned_bytes, s.in_use_bytes);
  EXPECT_EQ(s.pinned_bytes, s.chunks * (8 << 20)) << "small buffers come from chunks";
  auto large = pool->allocate((3 << 20) + 1);
  ASSERT_TRUE(large.ok()) << large.error().to_string();
  std::memset(*large, 0x5a, (3 << 20) + 1);
  held.push_back(*large);
  EXPECT_EQ(pool->stats().pinned_bytes, s.pinned_bytes + (3 << 20) + 4096)
      << "a large buffer is its own allocation, whole pages";
  EXPECT_GT(pool->stats().metadata_bytes, 0u) << "the runs are described in ordinary memory";
  for (void* p : held) pool->free(p);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(pool->allocate(0).code(), errc::invalid_argument);
}

TEST(PinnedHostPool, AForeignOrRepeatedFreeChangesNothing) {
  auto dev = sim();
  auto pool = make_pool(*dev);
  ASSERT_TRUE(pool);
  auto a = pool->allocate(1000);
  auto b = pool->allocate(1000);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto before = pool->stats().in_use_bytes;
  int local = 0;
  pool->free(&local);                       // not the pool's
  pool->free(static_cast<char*>(*a) + 16);  // inside a buffer, not its start
  EXPECT_EQ(pool->stats().in_use_bytes, before);
  pool->free(*a);
  pool->free(*a);  // again: no longer live
  EXPECT_EQ(pool->stats().in_use_bytes, before - 1024);
  auto c = pool->allocate(1000);
  auto d = pool->allocate(1000);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_NE(*c, *d) << "a repeated free must not hand one buffer out twice";
  for (void* p : {*b, *c, *d}) pool->free(p);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
}

TEST(PinnedRunHeap, ClassesWasteAtMostAFifth) {
  std::size_t last = 0;
  for (std::size_t n = 1; n <= (std::size_t{1} << 30); n = n < 4096 ? n + 1 : n + n / 7) {
    const std::size_t c = pinned_run_heap::class_size(n);
    ASSERT_GE(c, n);
    ASSERT_GE(c, last) << "classes grow with the request";
    if (n > 128) {
      ASSERT_LE(static_cast<double>(c - n), 0.2 * static_cast<double>(c)) << n;
    }
    EXPECT_EQ(c % 16, 0u);
    last = c;
  }
  EXPECT_EQ(pinned_run_heap::class_size(1), 16u);
  EXPECT_EQ(pinned_run_heap::class_size(129), 160u);
  EXPECT_EQ(pinned_run_heap::class_size(257), 320u);
  EXPECT_EQ(pinned_run_heap::class_size(std::size_t{1} << 30), std::size_t{1} << 30);
}

TEST(PinnedRunHeap, EmptyRunsGoBackAndTheirSpaceMerges) {
  auto dev = sim();
  pinned_run_heap heap(*dev, 1 << 20);
  // Three classes of one object per run (>= 64 KiB): each run is its
  // buffer. Freed, all but one empty run per class go back to the chunk.
  std::vector<void*> a;
  for (int i = 0; i < 4; ++i) a.push_back(heap.allocate(100 << 10, UINT64_MAX));
  for (void* p : a) ASSERT_NE(p, nullptr);
  EXPECT_EQ(heap.chunks(), 1u);
  for (void* p : a) heap.free(p);
  // 1 MiB chunk: 3 of the 4 runs' space merged back, so a buffer of about
  // three times the size fits without a new chunk.
  void* big = heap.allocate(300 << 10, UINT64_MAX);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(heap.chunks(), 1u) << "freed runs' space was merged and reused";
  EXPECT_EQ(heap.usable_size(big), pinned_run_heap::class_size(300 << 10));
  heap.free(big);
}

TEST(PinnedRunHeap, ANewChunkNeedsRoom) {
  auto dev = sim();
  pinned_run_heap heap(*dev, 256 << 10);
  void* a = heap.allocate(200 << 10, UINT64_MAX);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(heap.pinned(), 256u << 10);
  EXPECT_EQ(heap.allocate(200 << 10, 100 << 10), nullptr) << "a second chunk is more than the room";
  void* b = heap.allocate(200 << 10, 256 << 10);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(heap.chunks(), 2u);
  heap.free(a);
  heap.free(b);
}

TEST(PinnedHostPool, TheCapacityIsOutOfMemory) {
  auto dev = sim();
  auto pool = make_pool(*dev, {.host_capacity = 16 << 20, .host_chunk = 4 << 20});
  ASSERT_TRUE(pool);
  std::vector<void*> held;
  status last;
  for (int i = 0; i < 16; ++i) {
    auto p = pool->allocate(2 << 20);
    if (!p) {
      last = p.error();
      break;
    }
    held.push_back(*p);
  }
  ASSERT_FALSE(last.ok()) << "16 x 2 MiB fit in 16 MiB";
  EXPECT_EQ(last.code(), errc::out_of_memory);
  EXPECT_LE(pool->stats().pinned_bytes, 16u << 20);
  for (void* p : held) pool->free(p);
  EXPECT_TRUE(pool->allocate(2 << 20).ok()) << "freed memory is reused";
}

// A tier moves the same buffers step after step: once its peak is pinned,
// a step makes no device call (cuMemHostAlloc pins page by page, and
// cuMemFreeHost may wait for the whole device). Until 2026-11-27 a freed
// buffer went back unless the kept bytes stayed within 5% of those in use,
// so every cycle below gave back and took again all but one or two buffers.
TEST(PinnedHostPool, ACycleOfLargeBuffersReusesThemWithNoDeviceCall) {
  constexpr std::uint64_t mib = 1 << 20;
  auto dev = sim();
  auto pool = make_pool(*dev);
  ASSERT_TRUE(pool);
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE(cycle);
    std::vector<void*> held;
    for (const std::uint64_t bytes : {3 * mib, 5 * mib, mib, 8 * mib, 3 * mib - 5000}) {
      auto p = pool->allocate(bytes);
      ASSERT_TRUE(p.ok()) << p.error().to_string();
      held.push_back(*p);
    }
    for (void* p : held) pool->free(p);
    const auto s = pool->stats();
    EXPECT_EQ(pinned_calls(*dev).first, 5u) << "the first cycle's buffers, no more";
    EXPECT_EQ(pinned_calls(*dev).second, 0u);
    constexpr std::uint64_t all = 20 * mib - 4096;  // whole 4 KiB pages
    EXPECT_EQ(s.kept_bytes, all) << "every freed buffer kept";
    EXPECT_EQ(s.pinned_bytes, all);
    EXPECT_EQ(s.in_use_bytes, 0u);
  }
}

TEST(PinnedHostPool, KeptBuffersStayWithinThePeakInUseAndAreReused) {
  constexpr std::uint64_t mib = 1 << 20;
  auto dev = sim();
  auto pool = make_pool(*dev, {.host_chunk = 4 * mib, .host_kept = 0.05});
  ASSERT_TRUE(pool);
  std::vector<void*> held;
  for (int i = 0; i < 10; ++i) {
    auto p = pool->allocate(4 * mib);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    held.push_back(*p);
  }
  for (void* p : held) pool->free(p);
  held.clear();
  EXPECT_EQ(pool->stats().kept_bytes, 40 * mib);
  // A kept buffer serves a slightly smaller request too.
  auto again = pool->allocate(4 * mib - 5000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(pinned_calls(*dev).first, 10u) << "a kept buffer is reused";
  EXPECT_EQ(pool->stats().kept_bytes, 36 * mib);
  pool->free(*again);
  // 16 MiB fits no kept buffer. A new one within 5% over the 40 MiB peak
  // in use leaves 2 MiB of room: four kept buffers (the oldest) go back.
  auto big = pool->allocate(16 * mib);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  auto s = pool->stats();
  EXPECT_EQ(pinned_calls(*dev).second, 4u);
  EXPECT_EQ(s.pinned_bytes, 40 * mib);
  EXPECT_LE(s.peak_pinned_bytes, 42 * mib) << "at most 5% over the peak in use";
  EXPECT_EQ(s.kept_bytes, 24 * mib);
  // A smaller buffer fits within the headroom: nothing goes back.
  auto small = pool->allocate(mib);
  ASSERT_TRUE(small.ok());
  s = pool->stats();
  EXPECT_EQ(pinned_calls(*dev).second, 4u);
  EXPECT_EQ(s.pinned_bytes, 41 * mib);
  pool->free(*small);
  pool->free(*big);
  s = pool->stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.kept_bytes, s.pinned_bytes) << "everything pinned is kept for reuse";
}

TEST(PinnedHostPool, KeptBuffersMakeRoomUnderTheCapacity) {
  constexpr std::uint64_t mib = 1 << 20;
  auto dev = sim();
  auto pool = make_pool(*dev, {.host_capacity = 16 * mib, .host_chunk = 4 * mib, .host_kept = 1});
  ASSERT_TRUE(pool);
  auto held = pool->allocate(6 * mib);
  auto a = pool->allocate(6 * mib);
  ASSERT_TRUE(held.ok() && a.ok());
  pool->free(*a);
  EXPECT_EQ(pool->stats().kept_bytes, 6 * mib);
  auto b = pool->allocate(8 * mib);  // only 4 MiB of room: the kept buffer goes
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(pool->stats().kept_bytes, 0u);
  EXPECT_EQ(pool->stats().pinned_bytes, 14 * mib);
  EXPECT_EQ(pool->allocate(4 * mib).code(), errc::out_of_memory);
  pool->free(*b);  // kept: the pool has had 14 MiB in use
  EXPECT_EQ(pool->stats().pinned_bytes, 14 * mib);
  EXPECT_EQ(pool->stats().kept_bytes, 8 * mib);
  auto c = pool->allocate(6 * mib);
  ASSERT_TRUE(c.ok());
  pool->free(*c);
  ASSERT_EQ(pool->stats().kept_bytes, 6 * mib);
  std::vector<void*> small;
  status last;
  for (int i = 0; i < 64 && last.ok(); ++i) {
    auto p = pool->allocate(512 << 10);
    if (p) small.push_back(*p);
    if (!p) last = p.error();
  }
  EXPECT_EQ(last.code(), errc::out_of_memory);
  EXPECT_EQ(pool->stats().kept_bytes, 0u) << "chunks for small buffers take the kept room first";
  EXPECT_LE(pool->stats().pinned_bytes, 16 * mib);
  for (void* p : small) pool->free(p);
  pool->free(*held);
}

// The pool trusts its options: the options table refuses bad ones before
// any tier is made (the residency manager checks them in create()).
TEST(PinnedHostPool, BadOptionsAreRefusedByTheTable) {
  for (const tier_options& o :
       {tier_options{.host_chunk = 0}, tier_options{.host_large = 0},
        tier_options{.host_kept = -0.5}, tier_options{.host_kept = 2},
        tier_options{.nvme_queue_depth = 0}, tier_options{.nvme_block_size = 0}}) {
    EXPECT_EQ(check_tier_options(o).code(), errc::invalid_argument);
  }
}

// The buffers a residency manager would spill: every allocation of a
// bundled training trace, with its lifetime. The target: under 10%
// waste.
TEST(PinnedHostPool, WasteOnTheBundledTracesSizeMixStaysBounded) {
  for (const char* name :
       {"cs336_forward_cold.pickle", "cs336_forward_small_cold.pickle",
        "cs336_inference_warm.pickle", "cs336_train_fwd_bwd_cold.pickle", "cs336_train_warm.pickle",
        "decomfl_finetune_cold.pickle", "resnet50_lifetimes.csv"}) {
    SCOPED_TRACE(name);
    auto trace = replay::read_trace(std::string(STRATA_SOURCE_DIR) + "/bench/traces/" + name, 0);
    ASSERT_TRUE(trace.ok()) << trace.error().to_string();
    auto dev = open_device("sim:capacity=8GiB");
    ASSERT_TRUE(dev.ok());
    auto pool = make_pool(**dev);
    ASSERT_TRUE(pool);
    std::unordered_map<std::uint64_t, void*> live;
    for (const replay::trace_op& op : trace->ops) {
      if (op.kind == replay::op_kind::alloc && op.size > 0) {
        auto p = pool->allocate(op.size);
        ASSERT_TRUE(p.ok()) << p.error().to_string();
        live[op.addr] = *p;
      } else if (auto it = live.find(op.addr); it != live.end()) {
        pool->free(it->second);
        live.erase(it);
      }
    }
    const auto s = pool->stats();
    std::printf(
        "%s: peak pinned %.1f MiB, peak in use %.1f MiB, waste %.2f%%; %llu pinned allocations, "
        "%llu releases\n",
        name, static_cast<double>(s.peak_pinned_bytes) / (1 << 20),
        static_cast<double>(s.peak_in_use_bytes) / (1 << 20), 100 * s.peak_waste(),
        static_cast<unsigned long long>(pinned_calls(**dev).first),
        static_cast<unsigned long long>(pinned_calls(**dev).second));
    EXPECT_LT(s.peak_waste(), 0.10);
    EXPECT_GE(s.peak_pinned_bytes, s.peak_in_use_bytes);
    for (auto& [addr, p] : live) pool->free(p);
  }
}

TEST(PinnedHostPool, ThreadsShareThePool) {
  auto dev = sim();
  auto pool = make_pool(*dev);
  ASSERT_TRUE(pool);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(20261122 + t);
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 2 == 0) {
          const std::size_t n = 1 + rng() % (2 << 20);  // both paths
          auto p = pool->allocate(n);
          if (!p) {
            ++bad;
            continue;
          }
          auto* b = static_cast<unsigned char*>(*p);
          // Both ends mark the block as this thread's (checked at the free);
          // filling all of it would only slow the sanitizer builds down.
          b[0] = static_cast<unsigned char>(t);
          b[n - 1] = static_cast<unsigned char>(t);
          mine.emplace_back(b, n);
        } else {
          auto [b, n] = mine.back();
          mine.pop_back();
          if (b[0] != t || b[n - 1] != t) ++bad;
          pool->free(b);
        }
      }
      for (auto [b, n] : mine) pool->free(b);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace strata::testing
