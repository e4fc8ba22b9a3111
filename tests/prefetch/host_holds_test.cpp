// Host holds through the prefetcher (acquire_host/release_host): recorded
// in the order like device acquires, so that later steps read each buffer
// from NVMe into host memory ahead of its hold, as an optimizer step on
// host threads needs, and never fetch it to the device. Every byte a hold
// writes is the next hold's.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr int buffers = 8;

std::string scratch() {
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/host-holds";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

struct holds {
  std::unique_ptr<allocator> alloc;
  std::unique_ptr<residency_manager> manager;
  std::unique_ptr<prefetcher> fetch;
  std::vector<std::uint64_t> handles;
  std::vector<unsigned char> value = std::vector<unsigned char>(buffers, 0);

  // Eight 2 MiB nvme_home buffers (each goes home to NVMe at its last
  // release), host-held in turn each step; `prefetch_bytes` 0 turns
  // prefetching off.
  explicit holds(std::uint64_t prefetch_bytes) {
    allocator_options a;
    // The sim device, or the cuda device over the stand-in driver when
    // ctest runs the test there (stand_in_spec.hpp).
    a.device = test_device_spec("sim:capacity=8MiB");
    alloc = std::make_unique<allocator>(a);
    tier_options t;
    t.host_chunk = 2 * mib;
    t.host_capacity = 16 * mib;
    t.host_lookahead = 8 * mib;
    t.nvme_dir = scratch();
    t.nvme_block_size = 256 << 10;
    manager = std::move(*residency_manager::create(*alloc, t));
    prefetch_options p;
    p.prefetch_bytes = prefetch_bytes;
    p.prefetch_inflight = 4;
    fetch = std::move(*prefetcher::create(*manager, p));
    for (int k = 0; k < buffers; ++k) {
      handles.push_back(*manager->register_buffer(2 * mib, buffer_kind::optimizer_state,
                                                  residency_policy::nvme_home));
    }
  }
  holds(const holds&) = delete;
  holds& operator=(const holds&) = delete;
  holds(holds&&) = delete;
  holds& operator=(holds&&) = delete;
  ~holds() {
    fetch.reset();
    for (const auto h : handles) EXPECT_TRUE(manager->unregister(h).ok());
  }

  // One step: each buffer held on the host, checked (after the first
  // step), given new bytes and let go home.
  void step(bool first) {
    ASSERT_TRUE(fetch->begin_step().ok());
    for (int k = 0; k < buffers; ++k) {
      auto p = fetch->acquire_host(handles[k], access_mode::read_write);
      ASSERT_TRUE(p.ok()) << p.error().to_string();
      const auto* bytes = static_cast<const unsigned char*>(*p);
      if (!first) {
        EXPECT_TRUE(bytes[0] == value[k] && bytes[2 * mib - 1] == value[k]) << "buffer " << k;
      }
      value[k] = static_cast<unsigned char>(value[k] + 1 + k);
      std::memset(*p, value[k], 2 * mib);
      ASSERT_TRUE(fetch->release_host(handles[k]).ok());
    }
    ASSERT_TRUE(fetch->end_step().ok());
  }
};

// Steps 2 to 4 of a run: how many holds read their buffer from NVMe
// themselves, and what went to the device.
struct steady {
  std::uint64_t read_by_holds;
  std::uint64_t holds;
  std::uint64_t to_device;
};

steady run(std::uint64_t prefetch_bytes) {
  holds h(prefetch_bytes);
  h.step(true);
  const auto before = h.manager->stats();
  for (int s = 0; s < 3; ++s) h.step(false);
  const auto after = h.manager->stats();
  return {after.host_holds_read - before.host_holds_read, after.host_holds - before.host_holds,
          after.bytes_from_host + after.prefetch_copies + after.device_bytes};
}

TEST(HostHolds, LaterStepsReadThemAheadFromNvme) {
  const steady off = run(0);
  EXPECT_EQ(off.holds, 3u * buffers);
  EXPECT_EQ(off.read_by_holds, 3u * buffers) << "without prefetching every hold reads";
  const steady on = run(8 * mib);
  EXPECT_EQ(on.holds, 3u * buffers);
  std::printf(
      "holds of steps 2-4 that read their buffer themselves: %llu of %llu without "
      "prefetching, %llu with\n",
      static_cast<unsigned long long>(off.read_by_holds),
      static_cast<unsigned long long>(off.holds),
      static_cast<unsigned long long>(on.read_by_holds));
  EXPECT_LE(on.read_by_holds, 3u) << "at most one hold a step reads its own buffer";
  EXPECT_EQ(on.to_device, 0u) << "a host hold is never fetched to the device";
}

TEST(HostHolds, TheyAreAccessesOfTheOrder) {
  holds h(8 * mib);
  h.step(true);
  EXPECT_EQ(h.fetch->stats().recorded, static_cast<std::uint64_t>(buffers));
  h.step(false);
  EXPECT_EQ(h.fetch->stats().in_order, static_cast<std::uint64_t>(buffers));
}

}  // namespace
}  // namespace strata::testing
