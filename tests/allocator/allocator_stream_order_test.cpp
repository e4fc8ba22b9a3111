// Stream order on a slow sim device: memory freed while work is still queued
// is not handed to another stream (or, with record_stream or a device-wide
// free, to any stream) before that work has finished.
#include <gtest/gtest.h>

#include <atomic>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

struct slow_setup {
  std::unique_ptr<caching_allocator> a;
  stream_handle s1;
  stream_handle s2;
};

// A device that holds exactly `capacity`, whose stream ops each take 20 ms.
slow_setup make_slow(const char* capacity, const allocator_options& o = {}) {
  auto dev = open_test_device(std::string("sim:op_delay_us=20000,capacity=") + capacity);
  EXPECT_TRUE(dev.ok());
  slow_setup s;
  s.s1 = *(*dev)->create_stream();
  s.s2 = *(*dev)->create_stream();
  s.a = std::move(*caching_allocator::create(std::move(*dev), o));
  return s;
}

void set_flag(void* p) {
  static_cast<std::atomic<bool>*>(p)->store(true);
}

TEST(StreamOrder, NoReuseOnAnotherStreamBeforeTheEvent) {
  for (bool wait_first : {true, false}) {
    SCOPED_TRACE(wait_first ? "wait_before_grow:true" : "wait_before_grow:false");
    allocator_options o;
    o.wait_before_grow = wait_first;
    auto s = make_slow("8MiB", o);
    auto& a = *s.a;
    auto p = a.malloc_async(8 << 20, s.s1.native);
    ASSERT_TRUE(p.ok());
    std::atomic<bool> s1_done{false};
    ASSERT_TRUE(a.dev().launch_host_fn(s.s1, set_flag, &s1_done).ok());
    ASSERT_TRUE(a.free_async(*p, s.s1.native).ok());
    auto q = a.malloc_async(8 << 20, s.s2.native);  // needs s1's pages: must wait for s1
    ASSERT_TRUE(q.ok()) << q.error().to_string();
    EXPECT_TRUE(s1_done.load()) << "s1's pages went to s2 while s1 still had work on them";
    ASSERT_TRUE(a.free_async(*q, s.s2.native).ok());
  }
}

TEST(StreamOrder, SameStreamReuseIsImmediate) {
  auto s = make_slow("8MiB");
  auto& a = *s.a;
  auto p = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(p.ok());
  std::atomic<bool> s1_done{false};
  ASSERT_TRUE(a.dev().launch_host_fn(s.s1, set_flag, &s1_done).ok());
  ASSERT_TRUE(a.free_async(*p, s.s1.native).ok());
  auto q = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p) << "the block freed on s1 should be reused on s1 at once";
  EXPECT_FALSE(s1_done.load()) << "same-stream reuse should not wait for the stream";
  ASSERT_TRUE(a.dev().synchronize().ok());
}

TEST(StreamOrder, RecordStreamIsHonoured) {
  auto s = make_slow("8MiB");
  auto& a = *s.a;
  auto p = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a.record_stream(*p, s.s2.native).ok());
  std::atomic<bool> s2_done{false};
  ASSERT_TRUE(a.dev().launch_host_fn(s.s2, set_flag, &s2_done).ok());
  ASSERT_TRUE(a.free_async(*p, s.s1.native).ok());
  EXPECT_EQ(stat_of(a, "active_bytes.all.current"), 8 << 20) << "the free must be pending";
  auto q = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_TRUE(s2_done.load()) << "reused before the recorded stream's work finished";
  ASSERT_TRUE(a.free_async(*q, s.s1.native).ok());
}

TEST(StreamOrder, FreeOnAnotherStreamWaitsForThatStream) {
  auto s = make_slow("8MiB");
  auto& a = *s.a;
  auto p = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(p.ok());
  std::atomic<bool> s2_done{false};
  ASSERT_TRUE(a.dev().launch_host_fn(s.s2, set_flag, &s2_done).ok());
  ASSERT_TRUE(a.free_async(*p, s.s2.native).ok());
  auto q = a.malloc_async(8 << 20, s.s1.native);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(s2_done.load()) << "reused before the freeing stream reached the free";
  ASSERT_TRUE(a.free_async(*q, s.s1.native).ok());
}

TEST(StreamOrder, DeviceWideFreeWaitsForEveryStreamSeen) {
  auto s = make_slow("8MiB");
  auto& a = *s.a;
  auto seen = a.malloc_async(4096, s.s2.native);  // makes s2 known to the allocator
  ASSERT_TRUE(seen.ok());
  ASSERT_TRUE(a.free_async(*seen, s.s2.native).ok());
  ASSERT_TRUE(a.empty_cache().ok());
  auto p = a.malloc(8 << 20);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  std::atomic<bool> s2_done{false};
  ASSERT_TRUE(a.dev().launch_host_fn(s.s2, set_flag, &s2_done).ok());
  ASSERT_TRUE(a.free(*p).ok());
  EXPECT_FALSE(s2_done.load()) << "free() must not synchronize by itself";
  auto q = a.malloc(8 << 20);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_TRUE(s2_done.load()) << "reused before work queued on s2 before the free finished";
  EXPECT_GE(stat_of(a, "num_sync_all_streams"), 1);
  ASSERT_TRUE(a.free(*q).ok());
}

}  // namespace
}  // namespace strata::testing
