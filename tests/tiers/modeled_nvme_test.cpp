// The residency manager's modeled NVMe tier (offload option nvme_model) on
// a timing-only sim device, whose copies here take no time: a spill to it
// writes nothing and takes its write and its read-back on the spilling
// thread's modeled clock; an acquire's fill takes its read there; a
// prefetch's read runs on the reader thread and the acquiring stream waits
// for it, not the thread that asked, unless it waits for the reads. Misuse
// is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "strata/residency.hpp"
#include "strata/strata.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr double rate = 1e9;                // nvme_model_gbps 1
constexpr double block = 4096;              // the modeled file's block: the trailer
constexpr double buffer = 2.0 * (1 << 20);  // each buffer's bytes

struct modeled_tier {
  std::unique_ptr<allocator> alloc;
  std::unique_ptr<residency_manager> manager;
  stream_handle stream{};

  explicit modeled_tier(std::uint64_t host_capacity) {
    allocator_options a;
    a.device = "sim:capacity=16MiB,data=none,driver_costs=none";
    alloc = std::make_unique<allocator>(a);
    stream = *alloc->dev().create_stream();
    tier_options o;
    o.host_capacity = host_capacity;
    o.host_chunk = 256 << 10;  // within the smallest host capacity used here
    o.nvme_model = true;
    o.nvme_model_gbps = 1;
    o.nvme_write_behind = false;
    auto m = residency_manager::create(*alloc, o);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    if (m) manager = std::move(*m);
  }
  modeled_tier(const modeled_tier&) = delete;
  modeled_tier& operator=(const modeled_tier&) = delete;
  modeled_tier(modeled_tier&&) = delete;
  modeled_tier& operator=(modeled_tier&&) = delete;
  ~modeled_tier() {
    manager.reset();
    (void)alloc->dev().destroy_stream(stream);
  }

  [[nodiscard]] double clock() const { return *alloc->dev().modeled_clock(); }
  // A buffer written once on the device, then released.
  std::uint64_t written_buffer() {
    auto h = manager->register_buffer(2 * mib, buffer_kind::parameter, residency_policy::evictable);
    EXPECT_TRUE(h.ok());
    EXPECT_TRUE(manager->acquire(*h, stream.native).ok());
    EXPECT_TRUE(manager->release(*h, stream.native).ok());
    return *h;
  }
};

// A host tier too small to hold the buffer: it streams to the modeled tier.
TEST(ResidencyModeledNvme, SpillsAndFillsTakeTheirTimeOnTheCallingThread) {
  modeled_tier t(mib);
  ASSERT_TRUE(t.manager);
  const std::uint64_t h = t.written_buffer();
  EXPECT_EQ(t.clock(), 0.0);
  t.manager->spill(SIZE_MAX);
  ASSERT_EQ(*t.manager->where(h), tier::nvme);
  const double written = 2 * (buffer + block) / rate;  // the write with its trailer, the read back
  EXPECT_NEAR(t.clock(), written, 1e-12);
  auto p = t.manager->acquire(h, t.stream.native, access_mode::read_only);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_TRUE(t.alloc->dev().synchronize_stream(t.stream).ok());
  EXPECT_NEAR(t.clock(), written + buffer / rate, 1e-12) << "the fill's read";
  ASSERT_TRUE(t.manager->release(h, t.stream.native).ok());
  const double before = t.clock();
  t.manager->spill(SIZE_MAX);  // unwritten since: its extent stays, nothing is written
  EXPECT_EQ(t.clock(), before);
  EXPECT_EQ(t.manager->stats().bytes_to_nvme, static_cast<std::uint64_t>(buffer));
}

// A host tier that holds it: a prefetch reads it on the reader thread; the
// asking thread's clock stays, and the acquiring stream waits for the read.
TEST(ResidencyModeledNvme, APrefetchedReadIsWaitedForByTheStreamNotTheThread) {
  modeled_tier t(8 * mib);
  ASSERT_TRUE(t.manager);
  const std::uint64_t h = t.written_buffer();
  const std::uint64_t other = t.written_buffer();
  const std::uint64_t third = t.written_buffer();
  t.manager->spill(SIZE_MAX);  // all three to the host tier (6 MiB of 8)
  auto to_host =
      t.manager->register_buffer(6 * mib, buffer_kind::other, residency_policy::evictable);
  ASSERT_TRUE(to_host.ok());
  ASSERT_TRUE(t.manager->acquire(*to_host, t.stream.native).ok());
  ASSERT_TRUE(t.manager->release(*to_host, t.stream.native).ok());
  t.manager->spill(SIZE_MAX);  // 6 MiB more: the three go on to NVMe
  ASSERT_EQ(*t.manager->where(h), tier::nvme);
  ASSERT_TRUE(t.manager->unregister(*to_host).ok());  // host room: the read needs no spill
  (void)other;
  (void)third;
  const double asked = t.clock();
  auto started = t.manager->prefetch(h, tier::device, 0);
  ASSERT_TRUE(started.ok()) << started.error().to_string();
  EXPECT_EQ(*started, prefetch_outcome::started);
  EXPECT_EQ(t.clock(), asked) << "the asking thread does not wait for the read";
  ASSERT_TRUE(t.manager->acquire(h, t.stream.native, access_mode::read_only).ok());
  ASSERT_TRUE(t.alloc->dev().synchronize_stream(t.stream).ok());
  EXPECT_NEAR(t.clock(), asked + buffer / rate, 1e-12) << "the stream waited for the read";
  ASSERT_TRUE(t.manager->release(h, t.stream.native).ok());
}

// wait_for_reads: the asking thread waits for every read queued so far,
// one after the other on the disk; with none queued it does not wait.
TEST(ResidencyModeledNvme, WaitingForReadsTakesTheirTimeOnTheWaitingThread) {
  modeled_tier t(8 * mib);
  ASSERT_TRUE(t.manager);
  const std::uint64_t first = t.written_buffer();
  const std::uint64_t second = t.written_buffer();
  auto to_host =
      t.manager->register_buffer(8 * mib, buffer_kind::other, residency_policy::evictable);
  ASSERT_TRUE(to_host.ok());
  t.manager->spill(SIZE_MAX);  // both to the host tier
  ASSERT_TRUE(t.manager->acquire(*to_host, t.stream.native).ok());
  ASSERT_TRUE(t.manager->release(*to_host, t.stream.native).ok());
  t.manager->spill(SIZE_MAX);  // the whole host tier: both go on to NVMe
  ASSERT_EQ(*t.manager->where(first), tier::nvme);
  ASSERT_EQ(*t.manager->where(second), tier::nvme);
  ASSERT_TRUE(t.manager->unregister(*to_host).ok());
  const double asked = t.clock();
  t.manager->wait_for_reads();
  EXPECT_EQ(t.clock(), asked) << "no read queued: nothing to wait for";
  for (const std::uint64_t h : {first, second}) {
    auto started = t.manager->prefetch(h, tier::host, 0);
    ASSERT_TRUE(started.ok()) << started.error().to_string();
    EXPECT_EQ(*started, prefetch_outcome::started);
  }
  EXPECT_EQ(t.clock(), asked) << "prefetch does not wait";
  t.manager->wait_for_reads();
  EXPECT_NEAR(t.clock(), asked + 2 * buffer / rate, 1e-12) << "both reads, one after the other";
  EXPECT_EQ(*t.manager->where(first), tier::host);
  EXPECT_EQ(*t.manager->where(second), tier::host);
}

TEST(ResidencyModeledNvme, MisuseIsRefused) {
  allocator data(allocator_options{.device = "sim:capacity=16MiB"});
  tier_options o;
  o.nvme_model = true;
  o.nvme_write_behind = false;
  auto m = residency_manager::create(data, o);
  EXPECT_EQ(m.code(), errc::invalid_argument);
  EXPECT_NE(m.error().message().find("timing-only"), std::string::npos) << m.error().message();
  allocator timing(allocator_options{.device = "sim:capacity=16MiB,data=none,driver_costs=none"});
  o.nvme_write_behind = true;
  m = residency_manager::create(timing, o);
  EXPECT_EQ(m.code(), errc::invalid_argument);
  EXPECT_NE(m.error().message().find("nvme_write_behind"), std::string::npos);
}

}  // namespace
}  // namespace strata::testing
