// Four threads on two streams allocate, write, verify and free at once
// (run it under the tsan preset: it must be clean).
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

TEST(AllocatorConcurrency, FourThreadsTwoStreams) {
  auto made = make_two_stream_allocator("sim:capacity=512MiB");
  ASSERT_TRUE(made.alloc);
  caching_allocator& a = *made.alloc;
  const auto& streams = made.streams;
  std::atomic<int> failures{0};
  const std::uint32_t seed = 7;
  const auto worker = [&](int id) {
    std::mt19937 rng(seed + static_cast<std::uint32_t>(id));
    void* const stream = streams[id % 2];
    struct held {
      void* p;
      std::size_t n;
      std::uint32_t s;
    };
    std::vector<held> mine;
    for (int i = 0; i < 20000; ++i) {
      if (mine.size() < 32 && (mine.empty() || rng() % 2 == 0)) {
        const std::size_t n = rng() % 8 == 0 ? (1 << 20) + rng() % (4 << 20) : 1 + rng() % 8192;
        auto p = a.malloc_async(n, stream);
        if (!p) {
          failures.fetch_add(1);
          continue;
        }
        const auto s = static_cast<std::uint32_t>(rng());
        fill(*p, std::min<std::size_t>(n, 256), s);
        mine.push_back({*p, n, s});
      } else {
        const std::size_t k = rng() % mine.size();
        const held h = mine[k];
        mine[k] = mine.back();
        mine.pop_back();
        if (!holds(h.p, std::min<std::size_t>(h.n, 256), h.s)) failures.fetch_add(1);
        const auto how = rng() % 8;
        const status st = how == 0   ? a.free(h.p)
                          : how == 1 ? a.free_async(h.p, streams[(id + 1) % 2])
                                     : a.free_async(h.p, stream);
        if (!st) failures.fetch_add(1);
      }
      if (i % 5000 == 0) (void)a.stats();
    }
    for (const held& h : mine) {
      if (!a.free_async(h.p, stream)) failures.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < 4; ++id) threads.emplace_back(worker, id);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << "seed " << seed;
  EXPECT_EQ(stat_of(a, "allocation.all.current"), 0);
  ASSERT_TRUE(a.empty_cache().ok());
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 0);
}

}  // namespace
}  // namespace strata::testing
