// The event trace: off by default, complete and in order when on, a ring
// that keeps the newest events, and the PyTorch-format pickle export
// (loaded with python3's pickle module by check_snapshot_pickle.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include "allocator/allocator_fixture.hpp"
#include "event_trace.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::vector<std::string> actions_in(const std::string& json) {
  std::vector<std::string> out;
  const std::string key = R"("action":")";
  for (auto at = json.find(key); at != std::string::npos; at = json.find(key, at + 1)) {
    const auto start = at + key.size();
    out.push_back(json.substr(start, json.find('"', start) - start));
  }
  return out;
}

TEST(EventTrace, OffByDefault) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc_async(4096, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  EXPECT_EQ(a->trace_json(), R"({"capacity":0,"recorded":0,"dropped":0,"events":[]})");
}

TEST(EventTrace, RecordsEveryCallInOrder) {
  allocator_options o;
  o.trace_buffer = 1024;
  auto a = make_allocator("sim:capacity=32MiB", o);
  ASSERT_TRUE(a);
  auto p = a->malloc_async(3 * mib, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  auto q = a->malloc_async(3 * mib, nullptr);  // same stream, same size: no fast path while tracing
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
  const std::vector<std::string> expected{"segment_map",    "alloc", "free_requested",
                                          "free_completed", "alloc", "free_requested",
                                          "free_completed"};
  EXPECT_EQ(actions_in(a->trace_json()), expected) << a->trace_json();
  char addr[32];
  std::snprintf(addr, sizeof addr, R"("address":"%p")", *p);
  EXPECT_NE(a->trace_json().find(std::string(addr) + R"(,"size":3145728)"), std::string::npos)
      << a->trace_json();
  auto huge = a->malloc_async(64 * mib, nullptr);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(actions_in(a->trace_json()).back(), "oom");
}

TEST(EventTrace, RecordsStitchesAndUnmaps) {
  allocator_options o;
  o.trace_buffer = 4096;
  auto a = make_allocator("sim:capacity=32MiB", o);
  ASSERT_TRUE(a);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*a->malloc_async(4 * mib, nullptr));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(a->free_async(blocks[i], nullptr).ok());
  auto big = a->malloc_async(16 * mib, nullptr);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  auto acts = actions_in(a->trace_json());
  // A stitch maps the idle pages at the new range too; it unmaps nothing.
  EXPECT_NE(std::find(acts.begin(), acts.end(), "stitch"), acts.end());
  EXPECT_NE(std::find(acts.begin(), acts.end(), "segment_map"), acts.end());
  EXPECT_EQ(std::find(acts.begin(), acts.end(), "segment_unmap"), acts.end());
  EXPECT_EQ(stat_of(*a, "num_stitches"), 1);
  // Giving pages back unmaps them wherever they are mapped.
  ASSERT_TRUE(a->free_async(*big, nullptr).ok());
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(a->free_async(blocks[i], nullptr).ok());
  ASSERT_TRUE(a->empty_cache().ok());
  acts = actions_in(a->trace_json());
  EXPECT_NE(std::find(acts.begin(), acts.end(), "segment_unmap"), acts.end());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0);
}

TEST(EventTrace, RingKeepsTheNewest) {
  event_trace t(4);
  for (int i = 0; i < 10; ++i) t.record(trace_action::alloc, std::uintptr_t{512} * i, 512, nullptr);
  EXPECT_EQ(t.recorded(), 10u);
  EXPECT_EQ(t.dropped(), 6u);
  const auto events = t.events();
  ASSERT_EQ(events.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(events[i].address, 512 * (6 + i));
  for (std::size_t i = 1; i < 4; ++i) EXPECT_GE(events[i].time_ns, events[i - 1].time_ns);
}

TEST(EventTrace, PickleLoadsInPythonWithPytorchsStructure) {
  allocator_options o;
  o.trace_buffer = 4096;
  auto dev = open_device("sim:capacity=64MiB");
  ASSERT_TRUE(dev.ok());
  auto s2 = (*dev)->create_stream();
  ASSERT_TRUE(s2.ok());
  auto made = caching_allocator::create(std::move(*dev), o);
  ASSERT_TRUE(made.ok());
  caching_allocator& a = **made;
  std::vector<void*> live;
  for (std::size_t n : {std::size_t{100}, std::size_t{3000}, 2 * mib + 5, 5 * mib}) {
    live.push_back(*a.malloc_async(n, nullptr));
  }
  live.push_back(*a.malloc_async(8 * mib, s2->native));
  auto gone = a.malloc_async(3 * mib, nullptr);
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(a.free_async(*gone, nullptr).ok());
  const std::string bytes = a.snapshot_pickle();
  const std::string path = ::testing::TempDir() + "strata_snapshot.pickle";
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string cmd = std::string("python3 ") + STRATA_TEST_SOURCE_DIR +
                          "/allocator/check_snapshot_pickle.py " + path + " " +
                          std::to_string(live.size()) + " --complete";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;  // NOLINT(cert-env33-c): test harness
  for (void* p : live) ASSERT_TRUE(a.free(p).ok());
}

// trace_frames: each event carries the stack that made it, and each live
// block its allocation's, written as PyTorch's frame dicts.
TEST(EventTrace, FramesAreCapturedAndWrittenWithEachEvent) {
  allocator_options o;
  o.trace_buffer = 256;
  o.trace_frames = 6;
  auto a = make_allocator("sim:capacity=64MiB", o);
  ASSERT_TRUE(a);
  std::vector<void*> live;
  for (std::size_t n : {std::size_t{100}, 3 * mib}) live.push_back(*a->malloc_async(n, nullptr));
  void* gone = *a->malloc_async(4096, nullptr);
  ASSERT_TRUE(a->free_async(gone, nullptr).ok());
  const std::string path = ::testing::TempDir() + "strata_frames.pickle";
  std::ofstream(path, std::ios::binary) << a->snapshot_pickle();
  const std::string cmd = std::string("python3 ") + STRATA_TEST_SOURCE_DIR +
                          "/allocator/check_snapshot_pickle.py " + path + " 2 --complete --frames";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;  // NOLINT(cert-env33-c): test harness
  for (void* p : live) ASSERT_TRUE(a->free(p).ok());
  auto too_many = parse_allocator_conf("trace_buffer:67108864,trace_frames:32");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message().find("more than 1 GiB of frames"), std::string::npos);
  EXPECT_FALSE(parse_allocator_conf("trace_frames:33").ok());
}

}  // namespace
}  // namespace strata::testing
