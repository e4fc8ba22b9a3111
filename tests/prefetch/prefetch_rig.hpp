// The prefetch tests' rig: a sim allocator (the cuda device over the
// stand-in driver when ctest runs a test there), a residency manager and a
// prefetcher over it, buffers with reference bytes, and the tiers'
// options the tests start from. Random choices use a fixed seed, printed
// with any failure.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/nvme_store.hpp"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"

namespace strata::testing {

inline constexpr std::size_t mib = std::size_t{1} << 20;
inline constexpr unsigned seed = 20261123;

inline std::string scratch() {
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/prefetch";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

// The tiers' and the prefetcher's options of a rig.
struct setup {
  tier_options tiers;
  prefetch_options prefetch;
};

inline setup tiers(std::size_t host_capacity, bool with_nvme, bool write_behind = true) {
  setup o;
  o.tiers.host_chunk = 2 * mib;
  o.tiers.host_capacity = host_capacity;
  if (with_nvme) {
    o.tiers.nvme_dir = scratch();
    o.tiers.nvme_block_size = 256 << 10;
    o.tiers.nvme_queue_depth = 4;
  }
  o.prefetch.prefetch_bytes = 4 * mib;
  o.prefetch.device_lookahead = 4 * mib;
  o.tiers.host_lookahead = 8 * mib;
  o.prefetch.prefetch_inflight = 4;
  o.tiers.nvme_write_behind = write_behind;
  return o;
}

// A sim allocator, a residency manager and a prefetcher over it; buffers
// with reference bytes, used by "kernels" that are host reads and writes
// (so they wait for the stream first).
struct rig {
  std::unique_ptr<allocator> alloc;
  std::unique_ptr<residency_manager> manager;
  std::unique_ptr<prefetcher> fetch;
  stream_handle stream{};
  std::vector<std::uint64_t> handles;
  std::vector<std::vector<unsigned char>> bytes;
  std::mt19937 rng{seed};

  rig(const std::string& sim, const setup& o, io_faults* faults = nullptr) {
    allocator_options options;
    options.device = test_device_spec(sim);  // over the stand-in driver when ctest asks
    options.log_ooms = false;                // the fault cases make spills fail on purpose
    alloc = std::make_unique<allocator>(options);
    EXPECT_EQ(alloc->dev().name().starts_with("cuda"), cuda_expected()) << alloc->dev().name();
    stream = *alloc->dev().create_stream();
    auto m = residency_manager::create(*alloc, o.tiers, faults);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    if (!m) return;
    manager = std::move(*m);
    auto p = prefetcher::create(*manager, o.prefetch);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    if (p) fetch = std::move(*p);
  }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;
  rig(rig&&) = delete;
  rig& operator=(rig&&) = delete;
  ~rig() {
    fetch.reset();
    for (const auto h : handles) EXPECT_TRUE(manager->unregister(h).ok()) << h;
  }

  void add(int count, std::size_t n) {
    for (int i = 0; i < count; ++i) {
      auto h = manager->register_buffer(n, buffer_kind::parameter, residency_policy::evictable);
      ASSERT_TRUE(h.ok());
      handles.push_back(*h);
      bytes.emplace_back(n, static_cast<unsigned char>(handles.size()));
    }
  }
  // Acquires buffer k through the prefetcher, checks its bytes (unless
  // `first`), writes new ones, releases.
  status use(std::size_t k, bool first = false) {
    auto p = fetch->acquire(handles[k], stream.native);
    if (!p) return p.error();
    if (auto done = alloc->dev().synchronize_stream(stream); !done) return done;
    if (!first && std::memcmp(*p, bytes[k].data(), bytes[k].size()) != 0) {
      ADD_FAILURE() << "buffer " << k << " lost its bytes (seed " << seed << ")";
    }
    for (std::size_t i = 0; i < bytes[k].size(); i += 4096) {
      bytes[k][i] = static_cast<unsigned char>(rng());
    }
    std::memcpy(*p, bytes[k].data(), bytes[k].size());
    return fetch->release(handles[k], stream.native);
  }
  // One step: every buffer forward, then backward (a training step's order).
  status step(bool first = false) {
    if (auto s = fetch->begin_step(); !s) return s;
    const std::size_t n = handles.size();
    for (std::size_t i = 0; i < 2 * n; ++i) {
      const std::size_t k = i < n ? i : 2 * n - 1 - i;
      if (auto s = use(k, first && i < n); !s) return s;
    }
    return fetch->end_step();
  }
  // Every buffer's bytes, read back through the manager alone.
  void expect_every_byte() {
    for (std::size_t k = 0; k < handles.size(); ++k) {
      auto p = manager->acquire(handles[k], stream.native);
      ASSERT_TRUE(p.ok()) << k << ": " << p.error().to_string();
      ASSERT_TRUE(alloc->dev().synchronize_stream(stream).ok());
      EXPECT_EQ(std::memcmp(*p, bytes[k].data(), bytes[k].size()), 0)
          << "buffer " << k << " (seed " << seed << ")";
      ASSERT_TRUE(manager->release(handles[k], stream.native).ok());
    }
  }
};

}  // namespace strata::testing
