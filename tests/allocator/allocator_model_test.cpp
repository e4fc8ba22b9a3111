// Randomized model check: at least a million operations against a simple
// reference model. Live blocks never overlap, every live block keeps its
// bytes until it is freed, and the stats equal the model's sums.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

struct live_block {
  std::size_t requested;
  std::size_t rounded;
  std::uint32_t seed;
  void* stream;
};

// Writes or checks the block's pattern: all of it when small, else the head,
// the tail and one 64-byte stripe per 64 KiB (enough to catch any overlap at
// page or block granularity).
bool pattern(void* p, std::size_t n, std::uint32_t seed, bool write) {
  auto* b = static_cast<unsigned char*>(p);
  const auto stripe = [&](std::size_t off, std::size_t len) {
    len = std::min(len, n - off);
    if (write) {
      fill(b + off, len, seed + static_cast<std::uint32_t>(off));
      return true;
    }
    return holds(b + off, len, seed + static_cast<std::uint32_t>(off));
  };
  if (n <= 4096) return stripe(0, n);
  bool ok = stripe(0, 64) && stripe(n - 64, 64);
  for (std::size_t off = 65536; ok && off + 128 <= n; off += 65536) ok = stripe(off, 64);
  return ok;
}

std::size_t model_rounding(std::size_t bytes, const size_classes& classes) {
  if (bytes <= classes.slab_limit()) return classes.class_size(size_classes::class_of(bytes));
  return size_classes::round(bytes);
}

TEST(AllocatorModel, MillionRandomOperations) {
  const std::uint32_t seed = 20261122;
  // A million on the sim device; over the stand-in driver (the same
  // allocator through the cuda device's calls) a tenth of that, so the
  // suite stays within its time budget.
  std::uint64_t ops = std::getenv("STRATA_TEST_CUDA_DRIVER") != nullptr ? 100'000 : 1'000'000;
  if (const char* env = std::getenv("STRATA_MODEL_OPS")) ops = std::strtoull(env, nullptr, 10);
  SCOPED_TRACE("model check seed " + std::to_string(seed) + " (rerun with the same seed)");
  std::mt19937_64 rng(seed);

  auto dev = open_test_device("sim:capacity=256MiB");
  ASSERT_TRUE(dev.ok());
  auto s1 = (*dev)->create_stream();
  ASSERT_TRUE(s1.ok());
  auto made = caching_allocator::create(std::move(*dev), {});
  ASSERT_TRUE(made.ok());
  caching_allocator& a = **made;
  const size_classes classes(1 << 20, a.dev().granularity());
  void* const streams[] = {nullptr, s1->native};

  std::map<std::uintptr_t, live_block> live;
  std::vector<std::uintptr_t> order;  // live addresses, for random picks
  std::int64_t requested = 0;
  std::int64_t rounded = 0;
  std::uint64_t ooms = 0;

  const auto check_stats = [&](std::uint64_t op) {
    const auto m = a.stats().to_map();
    ASSERT_EQ(m.at("allocation.all.current"), static_cast<std::int64_t>(live.size()))
        << "op " << op;
    ASSERT_EQ(m.at("requested_bytes.all.current"), requested) << "op " << op;
    ASSERT_EQ(m.at("allocated_bytes.all.current"), rounded) << "op " << op;
    ASSERT_LE(m.at("reserved_bytes.all.current"), 256 << 20) << "op " << op;
  };

  for (std::uint64_t op = 0; op < ops; ++op) {
    const bool allocate = live.empty() || (rng() % 100 < 52 && rounded < (96 << 20));
    if (allocate) {
      const auto kind = rng() % 100;
      std::size_t size = 0;
      if (kind < 70) {
        size = 1 + rng() % 65536;
      } else if (kind < 95) {
        size = 65536 + rng() % (2 << 20);
      } else {
        size = (2 << 20) + rng() % (14 << 20);
      }
      void* stream = streams[rng() % 2];
      auto p = (rng() % 4 == 0) ? a.malloc(size) : a.malloc_async(size, stream);
      if (!p) {
        ASSERT_EQ(p.code(), errc::out_of_memory) << "op " << op << ": " << p.error().to_string();
        ++ooms;
        continue;
      }
      const auto addr = reinterpret_cast<std::uintptr_t>(*p);
      const std::size_t r = model_rounding(size, classes);
      ASSERT_EQ(addr % 512, 0u) << "op " << op;
      auto next = live.lower_bound(addr);
      ASSERT_TRUE(next == live.end() || next->first >= addr + r) << "overlap at op " << op;
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.rounded, addr) << "overlap at op " << op;
      }
      const auto s = static_cast<std::uint32_t>(rng());
      pattern(*p, size, s, true);
      live.emplace(addr, live_block{size, r, s, stream});
      order.push_back(addr);
      requested += static_cast<std::int64_t>(size);
      rounded += static_cast<std::int64_t>(r);
    } else {
      const std::size_t pick = rng() % order.size();
      const std::uintptr_t addr = order[pick];
      order[pick] = order.back();
      order.pop_back();
      const live_block b = live.at(addr);
      ASSERT_TRUE(pattern(reinterpret_cast<void*>(addr), b.requested, b.seed, false))
          << "block at op " << op << " lost its bytes";
      const auto how = rng() % 10;
      status freed;
      if (how < 6) {
        freed = a.free_async(reinterpret_cast<void*>(addr), b.stream);
      } else if (how < 8) {
        freed = a.free_async(reinterpret_cast<void*>(addr), streams[rng() % 2]);
      } else {
        freed = a.free(reinterpret_cast<void*>(addr));
      }
      ASSERT_TRUE(freed.ok()) << "op " << op << ": " << freed.to_string();
      live.erase(addr);
      requested -= static_cast<std::int64_t>(b.requested);
      rounded -= static_cast<std::int64_t>(b.rounded);
    }
    if (op % 4096 == 0) check_stats(op);
    if (HasFatalFailure()) return;
  }
  check_stats(ops);
  for (const auto& [addr, b] : live) {
    ASSERT_TRUE(pattern(reinterpret_cast<void*>(addr), b.requested, b.seed, false));
    ASSERT_TRUE(a.free(reinterpret_cast<void*>(addr)).ok());
  }
  ASSERT_TRUE(a.empty_cache().ok());
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 0);
  EXPECT_LT(ooms, ops / 100) << "the workload should mostly fit";
  RecordProperty("ooms", static_cast<int>(ooms));
}

}  // namespace
}  // namespace strata::testing
