// The large-block slot of the thread cache: same-size reuse on the same
// stream without the lock, exact stats, double frees caught, blocks lent to
// one thread freed by another, only a block's own thread parking it, and
// parked blocks given back under pressure and at thread exit.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

TEST(LargeSlot, SameSizeReuseKeepsStatsExact) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());  // parked in this thread's slot
  EXPECT_NE(a->snapshot_json().find("\"thread_cached\""), std::string::npos);
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.large_pool.current"), 0);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 0);
  EXPECT_EQ(m.at("active_bytes.all.current"), 0);
  EXPECT_EQ(m.at("allocation.all.freed"), 1);

  auto q = a->malloc_async(16 * mib - 100, nullptr);  // same rounded size: the slot
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.large_pool.current"), 1);
  EXPECT_EQ(m.at("allocated_bytes.large_pool.current"), 16 * mib);
  EXPECT_EQ(m.at("requested_bytes.large_pool.current"), 16 * mib - 100);
  EXPECT_EQ(m.at("allocation.all.allocated"), 2);
  fill(*q, 4096, 3);
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());  // lent block back to the slot
  auto r = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(holds(*r, 4096, 3)) << "the slot handed out a different block";
  ASSERT_TRUE(a->free_async(*r, nullptr).ok());
  m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 0);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 0);
  EXPECT_EQ(m.at("allocation.all.allocated"), 3);
  EXPECT_EQ(m.at("allocation.all.freed"), 3);
}

// The host's cost beyond the fast path: every allocation and free that
// takes the lock is counted and timed; the slot's lock-free reuse is not.
TEST(LargeSlot, OnlyCallsThatTakeTheLockAreCountedAndTimed) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(16 * mib, nullptr);  // locked: a new block
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());  // locked: parked in the slot
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("num_locked_calls"), 2);
  EXPECT_GT(m.at("locked_call_ns"), 0);
  const auto ns = m.at("locked_call_ns");
  for (int i = 0; i < 100; ++i) {  // the slot: no lock
    auto q = a->malloc_async(16 * mib, nullptr);
    ASSERT_TRUE(q.ok());
    ASSERT_TRUE(a->free_async(*q, nullptr).ok());
  }
  m = a->stats().to_map();
  EXPECT_EQ(m.at("num_locked_calls"), 2);
  EXPECT_EQ(m.at("locked_call_ns"), ns);
  EXPECT_NE(a->memory_summary().find("Locked calls: 2,"), std::string::npos) << a->memory_summary();
  EXPECT_FALSE(a->free_async(reinterpret_cast<void*>(0x10), nullptr).ok());  // foreign: locked
  EXPECT_EQ(a->stats().to_map().at("num_locked_calls"), 3);
}

// Blocks above the slab limit (512 KiB) but within small_size (1 MiB) live
// in the large arena, use the slot, and count in the small_pool stats.
TEST(LargeSlot, SlotBlocksWithinSmallSizeCountInTheSmallPool) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(768 << 10, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());          // parked
  auto q = a->malloc_async((768 << 10) - 100, nullptr);  // lent, no lock
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.small_pool.current"), 1);
  EXPECT_EQ(m.at("allocation.large_pool.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.small_pool.current"), 768 << 10);
  EXPECT_EQ(m.at("requested_bytes.small_pool.current"), (768 << 10) - 100);
  EXPECT_EQ(m.at("allocation.small_pool.allocated"), 2);
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
  ASSERT_TRUE(a->empty_cache().ok());  // takes the parked block back exactly
  m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.small_pool.current"), 0);
  EXPECT_EQ(m.at("allocation.small_pool.freed"), 2);
  EXPECT_EQ(m.at("allocated_bytes.large_pool.allocated"), 0);
  EXPECT_EQ(m.at("reserved_bytes.all.current"), 0);
}

TEST(LargeSlot, DoubleFreeOfAParkedBlockIsCaught) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(8 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  EXPECT_EQ(a->free_async(*p, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(a->free(*p).code(), errc::invalid_argument);
  EXPECT_EQ(a->record_stream(*p, nullptr).code(), errc::invalid_argument);
  auto q = a->malloc_async(8 * mib, nullptr);  // lent from the slot
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
  EXPECT_EQ(a->free_async(*q, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
}

TEST(LargeSlot, OneThreadsPeakIsNotInflatedByItsParkedBlock) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(8 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  auto q = a->malloc_async(12 * mib, nullptr);  // locked path: the parked block goes back first
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(stat_of(*a, "allocated_bytes.all.peak"), 12 * mib);
  EXPECT_EQ(stat_of(*a, "allocated_bytes.all.current"), 12 * mib);
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 12 * mib) << "the 8 MiB were not reused";
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
}

TEST(LargeSlot, AnotherThreadMayFreeALentBlock) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(4 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  auto q = a->malloc_async(4 * mib - 1000, nullptr);  // lent
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(*q, *p);
  std::thread([&] { EXPECT_TRUE(a->free_async(*q, nullptr).ok()); }).join();
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 0);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.all.current"), 0);
  EXPECT_EQ(a->free_async(*q, nullptr).code(), errc::invalid_argument) << "freed twice";
  auto r = a->malloc_async(4 * mib, nullptr);  // the block is back in its arena
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, *p);
  ASSERT_TRUE(a->free_async(*r, nullptr).ok());
}

// Only the thread that asked for a block parks it when it frees it: a block
// another thread frees (autograd freeing the forward pass's activations)
// goes straight back to its arena, where first fit sees its range.
TEST(LargeSlot, AnotherThreadsFreeGoesBackToTheArena) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  std::atomic<int> step{0};
  std::thread worker([&] {  // alive, with an empty slot, until step 2
    EXPECT_TRUE(a->free_async(*p, nullptr).ok());
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_EQ(a->snapshot_json().find("\"thread_cached\""), std::string::npos)
      << "another thread's free was parked in its slot";
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
  step = 2;
  worker.join();
  auto q = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());  // its own block: parked
  EXPECT_NE(a->snapshot_json().find("\"thread_cached\""), std::string::npos);
}

TEST(LargeSlot, ParkedBlocksServeOtherThreadsWhenMemoryIsShort) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  std::atomic<int> step{0};
  std::thread worker([&] {
    auto p = a->malloc_async(48 * mib, nullptr);
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE(a->free_async(*p, nullptr).ok());  // parked in the worker's slot
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  auto q = a->malloc_async(48 * mib, nullptr);
  EXPECT_TRUE(q.ok()) << q.error().to_string();
  if (q) {
    EXPECT_TRUE(a->free_async(*q, nullptr).ok());
  }
  step = 2;
  worker.join();
}

// A block parked in one thread's slot goes back to the arena when a large
// request takes the locked path, so that another thread's request of
// another size can have its range: in training the backward pass frees on
// autograd's thread, and the next step's forward pass (the main thread)
// wants those ranges again. Without that, the request maps new pages.
TEST(LargeSlot, AnotherThreadsRequestOfAnotherSizeGetsTheParkedRange) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  void* parked = nullptr;
  std::atomic<int> step{0};
  std::thread worker([&] {  // alive, its slot holding the block, until step 2
    auto p = a->malloc_async(48 * mib, nullptr);
    EXPECT_TRUE(p.ok());
    parked = p.ok() ? *p : nullptr;
    EXPECT_TRUE(p.ok() && a->free_async(*p, nullptr).ok());  // parked in its slot
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  auto before = a->stats().to_map();
  auto q = a->malloc_async(32 * mib, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(*q, parked) << "the request did not get the parked block's range";
  auto after = a->stats().to_map();
  EXPECT_EQ(after.at("reserved_bytes.all.current"), before.at("reserved_bytes.all.current"))
      << "the request mapped new pages";
  EXPECT_EQ(after.at("allocation.all.current"), 1);
  EXPECT_EQ(after.at("allocated_bytes.all.current"), 32 * mib);
  EXPECT_TRUE(a->free_async(*q, nullptr).ok());
  step = 2;
  worker.join();
}

TEST(LargeSlot, ThreadExitReturnsTheParkedBlock) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  void* lent = nullptr;
  std::thread([&] {
    auto p = a->malloc_async(6 * mib, nullptr);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(a->free_async(*p, nullptr).ok());
    auto q = a->malloc_async(32 * mib, nullptr);
    ASSERT_TRUE(q.ok());
    ASSERT_TRUE(a->free_async(*q, nullptr).ok());  // parked
    auto r = a->malloc_async(32 * mib, nullptr);   // lent, and still live at exit
    ASSERT_TRUE(r.ok());
    lent = *r;
  }).join();
  EXPECT_EQ(stat_of(*a, "allocated_bytes.all.current"), 32 * mib);
  ASSERT_TRUE(a->free_async(lent, nullptr).ok());
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
  EXPECT_EQ(stat_of(*a, "requested_bytes.all.current"), 0);
  ASSERT_TRUE(a->empty_cache().ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0) << "a parked block pinned its pages";
}

// Two threads on two streams reuse large blocks through their slots while
// handing some blocks to each other to free (run under tsan).
TEST(LargeSlot, TwoThreadsTradeBlocks) {
  auto made = make_two_stream_allocator("sim:capacity=1GiB");
  ASSERT_TRUE(made.alloc);
  caching_allocator& a = *made.alloc;
  const auto& streams = made.streams;
  std::array<std::atomic<void*>, 2> mailbox{};
  std::atomic<int> failures{0};
  const std::uint32_t seed = 11;
  const auto worker = [&](int id) {
    std::mt19937 rng(seed + static_cast<std::uint32_t>(id));
    void* const stream = streams[id];
    for (int i = 0; i < 4000; ++i) {
      const std::size_t n = (2 + rng() % 3) * mib;
      auto p = a.malloc_async(n, stream);
      if (!p) {
        failures.fetch_add(1);
        continue;
      }
      fill(*p, 64, static_cast<std::uint32_t>(i));
      if (!holds(*p, 64, static_cast<std::uint32_t>(i))) failures.fetch_add(1);
      if (rng() % 4 == 0) {
        // Post it to the other thread, which frees it on either stream.
        void* old = mailbox[1 - id].exchange(*p);
        if (old != nullptr && !a.free_async(old, streams[1 - id])) failures.fetch_add(1);
      } else if (!a.free_async(*p, stream)) {
        failures.fetch_add(1);
      }
      if (void* in = mailbox[id].exchange(nullptr); in != nullptr) {
        if (!a.free_async(in, streams[rng() % 2])) failures.fetch_add(1);
      }
    }
  };
  std::thread t0(worker, 0);
  std::thread t1(worker, 1);
  t0.join();
  t1.join();
  for (int id = 0; id < 2; ++id) {
    if (void* left = mailbox[id].exchange(nullptr); left != nullptr) {
      ASSERT_TRUE(a.free_async(left, streams[1 - id]).ok());
    }
  }
  EXPECT_EQ(failures.load(), 0) << "seed " << seed;
  EXPECT_EQ(stat_of(a, "allocation.all.current"), 0);
  EXPECT_EQ(stat_of(a, "requested_bytes.all.current"), 0);
  ASSERT_TRUE(a.empty_cache().ok());
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 0);
}

}  // namespace
}  // namespace strata::testing
