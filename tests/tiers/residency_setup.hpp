// The residency manager's tests' setup: a sim device (the cuda device over
// the stand-in driver when ctest runs a test there), small tiers (an
// 8 MiB pinned host pool, NVMe in the build's scratch directory), and a
// model of buffers whose reference bytes each use checks and renews.
//
// Thread safety: a model is one thread's; the manager is shared.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/residency.hpp"

namespace strata::testing {

inline constexpr std::size_t mib = std::size_t{1} << 20;

inline std::string scratch() {
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/residency";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

inline tier_options small_tiers(bool with_nvme = true) {
  tier_options o;
  o.host_chunk = 2 * mib;
  o.host_capacity = 8 * mib;
  if (with_nvme) {
    o.nvme_dir = scratch();
    o.nvme_block_size = 256 << 10;
    o.nvme_queue_depth = 4;
  }
  return o;
}

struct setup {
  std::unique_ptr<allocator> alloc;
  std::unique_ptr<residency_manager> manager;
  stream_handle streams[2]{};
};

inline setup make(const std::string& sim_spec, const tier_options& o, io_faults* faults = nullptr) {
  setup s;
  allocator_options options;
  options.device = test_device_spec(sim_spec);
  s.alloc = std::make_unique<allocator>(options);
  EXPECT_EQ(s.alloc->dev().name().starts_with("cuda"), cuda_expected()) << s.alloc->dev().name();
  for (auto& st : s.streams) st = *s.alloc->dev().create_stream();
  auto m = residency_manager::create(*s.alloc, o, faults);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  if (m) s.manager = std::move(*m);
  return s;
}

// The buffers, their reference bytes, and checked use of them.
struct model {
  model(residency_manager& manager, device& d) : m(manager), dev(d) {}
  residency_manager& m;
  device& dev;
  std::vector<std::uint64_t> handles;
  std::vector<std::vector<unsigned char>> bytes;
  std::mt19937 rng{20261122};

  void add(std::size_t n) {
    auto h = m.register_buffer(n, buffer_kind::optimizer_state, residency_policy::evictable);
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
    bytes.emplace_back(n);
    for (auto& b : bytes.back()) b = static_cast<unsigned char>(rng());
  }
  // Acquires buffer k, checks its bytes (after the first use), writes new
  // ones, releases. Returns the acquire's status.
  status use(std::size_t k, stream_handle s, bool first) {
    auto p = m.acquire(handles[k], s.native);
    if (!p) return p.error();
    // The fill is ordered on `s`: "kernels" here are host reads and writes,
    // so they wait for the stream first.
    if (auto done = dev.synchronize_stream(s); !done) return done;
    if (!first && std::memcmp(*p, bytes[k].data(), bytes[k].size()) != 0) {
      ADD_FAILURE() << "buffer " << k << " lost its bytes";
    }
    for (std::size_t i = 0; i < bytes[k].size(); i += 4096) {
      bytes[k][i] = static_cast<unsigned char>(rng());
    }
    std::memcpy(*p, bytes[k].data(), bytes[k].size());
    return m.release(handles[k], s.native);
  }
  // Acquires buffer k read_only, checks its bytes, releases.
  void read(std::size_t k, stream_handle s) {
    auto p = m.acquire(handles[k], s.native, access_mode::read_only);
    ASSERT_TRUE(p.ok()) << "buffer " << k << ": " << p.error().to_string();
    ASSERT_TRUE(dev.synchronize_stream(s).ok());
    EXPECT_EQ(std::memcmp(*p, bytes[k].data(), bytes[k].size()), 0) << "buffer " << k;
    ASSERT_TRUE(m.release(handles[k], s.native).ok());
  }
};

/// The random tests' working set: 14 buffers of 1 to 2 MiB (sizes from the
/// model's seeded generator, ~21 MiB in all) over a 16 MiB sim device, the
/// 8 MiB host tier and NVMe, each of them forced through every tier.
struct random_buffers {
  setup s = make("sim:capacity=16MiB", small_tiers());
  std::optional<model> md;

  random_buffers() {
    if (!s.manager) return;
    md.emplace(*s.manager, s.alloc->dev());
    for (int i = 0; i < 14; ++i) md->add(mib + (md->rng() % 1024) * 1024);
  }
};

}  // namespace strata::testing
