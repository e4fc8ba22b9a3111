// The end of the OOM chain: the report and its verdict, and pressure
// handlers that free memory, fail, or throw.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OomReport, FieldsAndVerdictOnASmallDevice) {
  auto a = make_allocator("sim:capacity=32MiB");
  ASSERT_TRUE(a);
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) {
    auto p = a->malloc_async(8 * mib, nullptr);
    ASSERT_TRUE(p.ok());
    held.push_back(*p);
  }
  EXPECT_EQ(a->last_oom_report(), "null");
  // The chain creates the 8 MiB the device still has, then comes up short:
  // those pages stay cached (idle), and the report says so.
  auto p = a->malloc_async(16 * mib, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), errc::out_of_memory);
  const std::string& text = p.error().message();
  for (
      const char* part :
      {"cannot allocate 16 MiB", "device capacity 32 MiB", "allocated 24 MiB", "reserved 32 MiB",
       "(8 MiB idle)", "largest live blocks: 8 MiB at",
       "verdict: needs 8 MiB more than the device has: spill at least 8 MiB "  // NOLINT(bugprone-suspicious-missing-comma)
       "to host memory or reduce the batch"}) {
    EXPECT_TRUE(has(text, part)) << part << " missing from: " << text;
  }
  const std::string json = a->last_oom_report();
  for (
      const char* part :
      {"\"requested\":16777216", "\"capacity\":33554432", "\"allocated\":25165824",
       "\"reserved\":33554432", "\"reserved_unallocated\":8388608", "\"idle\":8388608",
       "\"device_free\":0", "\"size\":8388608",
       R"("verdict":"needs 8 MiB more than the device has: spill at least 8 MiB to host )"  // NOLINT(bugprone-suspicious-missing-comma)
       R"(memory or reduce the batch"})"}) {
    EXPECT_TRUE(has(json, part)) << part << " missing from: " << json;
  }
  EXPECT_TRUE(has(a->snapshot_json(), "\"last_oom\":{\"requested\":16777216"));
  EXPECT_EQ(stat_of(*a, "num_ooms"), 1);
  for (void* q : held) ASSERT_TRUE(a->free_async(q, nullptr).ok());
  auto fits = a->malloc_async(16 * mib, nullptr);  // the allocator keeps working
  EXPECT_TRUE(fits.ok());
}

TEST(OomReport, OverTheLimitSuggestsTheFraction) {
  allocator_options o;
  o.memory_fraction = 0.5;
  auto a = make_allocator("sim:capacity=64MiB", o);
  ASSERT_TRUE(a);
  auto p = a->malloc_async(40 * mib, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(has(p.error().message(), "raise memory_fraction to at least 0.625"))
      << p.error().message();
  auto q = a->malloc_async(100 * mib, nullptr);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(has(q.error().message(), "more than the device has in one block"))
      << q.error().message();
}

// A stand-in for the tier manager: holds blocks and frees them on request.
struct spiller {
  caching_allocator* a = nullptr;
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::vector<std::size_t> asked;
  // Takes `n` blocks of `bytes` that it will give up on request.
  void hold(int n, std::size_t bytes) {
    for (int i = 0; i < n; ++i) {
      auto p = a->malloc_async(bytes, nullptr);
      ASSERT_TRUE(p.ok());
      blocks.emplace_back(*p, bytes);
    }
  }
  std::size_t operator()(std::size_t bytes) {
    asked.push_back(bytes);
    std::size_t freed = 0;
    while (freed < bytes && !blocks.empty()) {
      EXPECT_TRUE(a->free_async(blocks.back().first, nullptr).ok());
      freed += blocks.back().second;
      blocks.pop_back();
    }
    return freed;
  }
};

TEST(PressureHandlers, AHandlerThatFreesMakesTheRetrySucceed) {
  auto a = make_allocator("sim:capacity=32MiB");
  ASSERT_TRUE(a);
  spiller s{a.get(), {}, {}};
  s.hold(4, 8 * mib);
  const std::uint64_t id = a->add_pressure_handler([&](std::size_t n) { return s(n); });
  EXPECT_NE(id, 0u);
  auto p = a->malloc_async(12 * mib, nullptr);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_EQ(s.asked.size(), 1u);
  EXPECT_EQ(s.asked[0], 12 * mib);
  EXPECT_EQ(s.blocks.size(), 2u);
  EXPECT_EQ(stat_of(*a, "num_ooms"), 0);
  EXPECT_GE(stat_of(*a, "num_alloc_retries"), 1);
  EXPECT_TRUE(a->remove_pressure_handler(id).ok());
  EXPECT_EQ(a->remove_pressure_handler(id).code(), errc::invalid_argument);
}

// Half-page blocks, freed one half of each page first: what the handler
// frees in its first round covers the request's bytes but frees no page, so
// one retry fails. The chain asks again, for more, until pages come free (on
// an H200 a 70 MiB request failed that way under a 16 GiB cap with 14.8 GiB
// of spillable buffers on the device).
TEST(PressureHandlers, AreAskedAgainWhileWhatTheyFreeSharesPagesWithLiveBlocks) {
  auto a = make_allocator("sim:capacity=8MiB");
  ASSERT_TRUE(a);
  spiller s{a.get(), {}, {}};
  s.hold(8, mib);  // two to a 2 MiB page
  ASSERT_EQ(stat_of(*a, "reserved_bytes.all.current"), static_cast<std::int64_t>(8 * mib));
  // Given up in this order: the first block of each page, then the second.
  std::vector<std::pair<void*, std::size_t>> order;
  for (std::size_t i = 1; i < 8; i += 2) order.push_back(s.blocks[i]);
  for (std::size_t i = 0; i < 8; i += 2) order.push_back(s.blocks[i]);
  s.blocks.assign(order.rbegin(), order.rend());  // operator() takes from the back
  a->add_pressure_handler([&](std::size_t n) { return s(n); });
  auto p = a->malloc_async(2 * mib, nullptr);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_GE(s.asked.size(), 2u) << "one round freed a whole page: the test lost its point";
  EXPECT_EQ(s.asked[0], 2 * mib);
  EXPECT_GE(s.asked[1], 2 * s.asked[0]);
  EXPECT_EQ(stat_of(*a, "num_ooms"), 0);
  EXPECT_GE(stat_of(*a, "num_alloc_retries"), 2);
}

TEST(PressureHandlers, FailingAndThrowingHandlersDoNotBreakTheChain) {
  auto a = make_allocator("sim:capacity=32MiB");
  ASSERT_TRUE(a);
  spiller s{a.get(), {}, {}};
  s.hold(4, 8 * mib);
  int calls = 0;
  a->add_pressure_handler([&](std::size_t) -> std::size_t {
    ++calls;
    throw std::runtime_error("tier manager broke");
  });
  a->add_pressure_handler([&](std::size_t) -> std::size_t {
    ++calls;
    return 0;  // nothing to give
  });
  auto p = a->malloc_async(8 * mib, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(has(p.error().message(), "pressure handlers asked for 8 MiB, freed 0 B, 1 failed"))
      << p.error().message();
  EXPECT_TRUE(has(a->last_oom_report(), "\"handler_failures\":1"));
  // A working handler after the broken ones still rescues the request.
  a->add_pressure_handler([&](std::size_t n) { return s(n); });
  auto q = a->malloc_async(8 * mib, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(stat_of(*a, "num_ooms"), 1);
}

}  // namespace
}  // namespace strata::testing
