// The thread-cache fast path: reuse on the same stream without the lock,
// exact stats, double frees still caught, record_stream respected, and
// caches that outlive their allocator or thread.
#include <gtest/gtest.h>

#include <thread>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

TEST(ThreadCache, SameStreamReuseKeepsStatsExact) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(3000, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());  // parked in this thread's cache
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.all.current"), 0);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 0);
  EXPECT_EQ(m.at("active_bytes.all.current"), 0);
  EXPECT_EQ(m.at("allocation.all.allocated"), 1);
  EXPECT_EQ(m.at("allocation.all.freed"), 1);
  auto q = a->malloc_async(2900, nullptr);  // same class: served from the cache
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.all.current"), 1);
  EXPECT_EQ(m.at("allocated_bytes.all.current"), 3072);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 2900);
  EXPECT_EQ(m.at("allocation.all.allocated"), 2);
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
}

TEST(ThreadCache, DoubleFreeOfACachedObjectIsCaught) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(100, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  EXPECT_EQ(a->free_async(*p, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(a->free(*p).code(), errc::invalid_argument);
  EXPECT_EQ(a->record_stream(*p, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
}

TEST(ThreadCache, RecordedStreamsBypassTheCache) {
  auto dev = open_device("sim:capacity=64MiB,op_delay_us=20000");
  ASSERT_TRUE(dev.ok());
  auto s2 = (*dev)->create_stream();
  ASSERT_TRUE(s2.ok());
  auto made = caching_allocator::create(std::move(*dev), {});
  ASSERT_TRUE(made.ok());
  auto& a = **made;
  auto warm = a.malloc_async(4096, nullptr);  // binds this thread's cache to the default stream
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(a.free_async(*warm, nullptr).ok());
  auto p = a.malloc_async(4096, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a.record_stream(*p, s2->native).ok());
  ASSERT_TRUE(a.dev()
                  .launch_host_fn(
                      *s2, [](void*) {}, nullptr)
                  .ok());
  ASSERT_TRUE(a.free_async(*p, nullptr).ok());
  EXPECT_EQ(stat_of(a, "active_bytes.all.current"), 4096) << "the free must wait for s2";
  auto q = a.malloc_async(4096, nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_NE(*q, *p) << "a block still in use on a recorded stream was handed out";
  ASSERT_TRUE(a.dev().synchronize().ok());
}

TEST(ThreadCache, CachesOutliveAllocatorsAndThreads) {
  for (int round = 0; round < 3; ++round) {
    auto a = make_allocator("sim:capacity=64MiB");
    ASSERT_TRUE(a);
    std::atomic<int> step{0};
    std::thread worker([&] {
      auto p = a->malloc_async(512, nullptr);
      EXPECT_TRUE(p.ok());
      EXPECT_TRUE(a->free_async(*p, nullptr).ok());  // parked in the worker's cache
      step = 1;
      while (step.load() != 2) std::this_thread::yield();
      // The allocator is gone: this thread's cache must not touch it, now or
      // at thread exit. A new allocator re-binds it.
      auto b = make_allocator("sim:capacity=64MiB");
      auto q = b->malloc_async(512, nullptr);
      EXPECT_TRUE(q.ok());
      EXPECT_TRUE(b->free_async(*q, nullptr).ok());
      EXPECT_EQ(stat_of(*b, "allocation.all.current"), 0);
    });
    while (step.load() != 1) std::this_thread::yield();
    EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
    a.reset();
    step = 2;
    worker.join();
  }
}

TEST(ThreadCache, ThreadExitReturnsParkedObjects) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  std::thread([&] {
    for (int i = 0; i < 100; ++i) {
      auto p = a->malloc_async(1 + i * 100, nullptr);
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE(a->free_async(*p, nullptr).ok());
    }
  }).join();
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
  ASSERT_TRUE(a->empty_cache().ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0) << "parked objects pinned their slabs";
}

}  // namespace
}  // namespace strata::testing
