// The prefetcher over a residency manager on a small sim device: learned
// order, fetches ahead through the host and the NVMe tier, divergence and
// re-sync, hints without an order, memory pressure, threads, and the
// counters in the allocator's stats (the faults: prefetch_faults_test.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "../counter_names.hpp"
#include "prefetch_rig.hpp"

namespace strata::testing {
namespace {

TEST(Prefetch, TheLearnedOrderBringsBuffersFromTheHostAhead) {
  rig r("sim:capacity=8MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(6, 2 * mib);  // 12 MiB on an 8 MiB device
  ASSERT_TRUE(r.step(true).ok());
  const auto first = r.fetch->stats();
  EXPECT_EQ(first.recorded, 12u);
  EXPECT_EQ(first.hits, 0u) << "nothing is prefetched while the order is recorded";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.step().ok());
  const auto c = r.fetch->stats();
  EXPECT_EQ(c.steps, 4u);
  EXPECT_EQ(c.in_order, 36u);
  EXPECT_EQ(c.resyncs + c.unrecorded, 0u);
  EXPECT_GT(c.issued_device, 0u);
  EXPECT_GT(c.hits, 0u) << "no acquire found its buffer prefetched";
  EXPECT_GT(c.step_bytes_from_host, 0u);
  EXPECT_GT(c.step_bytes_to_host, 0u);
  r.expect_every_byte();
}

// A model's shape through the prefetcher: `layers` weights of `weight`
// bytes and small biases, read in forward and backward, then each updated
// with its two optimizer states; every acquire must succeed and keep its
// bytes.
void run_model_shape(const std::string& sim, const setup& o, std::size_t weight) {
  rig r(sim, o);
  ASSERT_TRUE(r.fetch);
  constexpr std::size_t layers = 4;
  for (std::size_t layer = 0; layer < layers; ++layer) {  // parameters 0 to 7
    r.add(1, weight);
    r.add(1, 1 << 10);
  }
  for (std::size_t layer = 0; layer < layers; ++layer) {  // their states, 8 to 23
    r.add(2, weight);
    r.add(2, 1 << 10);
  }
  const auto touch = [&](std::size_t k, access_mode mode) -> status {
    auto p = r.fetch->acquire(r.handles[k], r.stream.native, mode);
    if (!p) return p.error();
    if (auto s = r.alloc->dev().synchronize_stream(r.stream); !s) return s;
    if (mode == access_mode::read_write) {
      r.bytes[k][0] = static_cast<unsigned char>(r.bytes[k][0] + 1);
      std::memcpy(*p, r.bytes[k].data(), r.bytes[k].size());
    } else if (std::memcmp(*p, r.bytes[k].data(), r.bytes[k].size()) != 0) {
      ADD_FAILURE() << "buffer " << k << " lost its bytes";
    }
    return r.fetch->release(r.handles[k], r.stream.native);
  };
  for (std::size_t k = 0; k < r.handles.size(); ++k) {
    ASSERT_TRUE(touch(k, access_mode::read_write).ok());
  }
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(r.fetch->begin_step().ok());
    for (const std::size_t k : {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0}) {
      const status s = touch(k, access_mode::read_only);
      ASSERT_TRUE(s.ok()) << "step " << step << ", parameter " << k << ": " << s.to_string();
    }
    for (std::size_t k = 0; k < 2 * layers; ++k) {
      for (const std::size_t b : {k, 8 + 2 * k, 9 + 2 * k}) {
        const status s = touch(b, access_mode::read_write);
        ASSERT_TRUE(s.ok()) << "step " << step << ", buffer " << b << ": " << s.to_string();
      }
    }
    ASSERT_TRUE(r.fetch->end_step().ok());
  }
  EXPECT_GT(r.manager->stats().prefetch_reads, 0u);
  r.expect_every_byte();
}

setup tight_host(std::size_t host) {
  setup o;
  o.tiers.host_capacity = host;
  o.tiers.host_chunk = 64 << 10;
  o.tiers.host_large = 4096;
  o.tiers.nvme_dir = scratch();
  o.tiers.nvme_block_size = 64 << 10;
  o.prefetch.prefetch_bytes = mib;
  o.prefetch.device_lookahead = mib;
  o.tiers.host_lookahead = 8 * mib;
  o.prefetch.prefetch_inflight = 16;
  return o;
}

// Reads ahead into a small host tier must leave an acquire's own fill the
// room to stream through: before they did, a host tier full of reads in
// flight (no victims) made an acquire fail with "no pinned memory" (seen
// with strata_torch.offload's Adam state).
TEST(Prefetch, ReadsAheadLeaveRoomForAnAcquiresOwnFill) {
  run_model_shape("sim:capacity=1MiB,granularity=64KiB", tight_host(2 * mib), 256 << 10);
}

// A host tier only twice the largest buffer, its arena fragmented by small
// ones: a streamed fill takes the manager's reserved staging chunks when
// the tier has no room left for its own (before: "no pinned memory").
TEST(Prefetch, AFullHostTierStillStreamsFillsThroughTheReserve) {
  run_model_shape("sim:capacity=8MiB,granularity=64KiB", tight_host(4 * mib), 2 * mib);
}

TEST(Prefetch, NvmeBuffersAreReadAheadThenCopied) {
  rig r("sim:capacity=8MiB", tiers(8 * mib, true));
  ASSERT_TRUE(r.fetch);
  r.add(10, 2 * mib);  // 20 MiB: 8 on the device, 8 on the host, the rest on NVMe
  ASSERT_TRUE(r.step(true).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.step().ok());
  const auto fills = r.manager->stats();
  EXPECT_GT(fills.prefetch_reads, 0u);
  EXPECT_GT(fills.fills_from_nvme, 0u);
  EXPECT_GT(fills.prefetch_hits, 0u);
  EXPECT_EQ(fills.prefetch_failed, 0u);
  EXPECT_GT(r.fetch->stats().step_bytes_from_nvme, 0u);
  r.expect_every_byte();
}

TEST(Prefetch, AllocationsUnderPressureSpillPrefetchedBuffersAndCountThem) {
  rig r("sim:capacity=8MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(6, 2 * mib);
  ASSERT_TRUE(r.step(true).ok());
  ASSERT_TRUE(r.fetch->begin_step().ok());
  // 0 to 3 were on the device already; from 3 on, 4 and 5 are fetched ahead.
  for (std::size_t k = 0; k < 4; ++k) ASSERT_TRUE(r.use(k).ok());
  ASSERT_GT(r.manager->stats().prefetched_bytes, 0u);
  // A plain allocation of the whole device: prefetching never makes one fail.
  auto p = r.alloc->try_malloc(8 * mib);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_GT(r.fetch->stats().wasted_bytes, 0u);
  ASSERT_TRUE(r.alloc->try_free(*p).ok());
  for (std::size_t k = 4; k < r.handles.size(); ++k) ASSERT_TRUE(r.use(k).ok());
  ASSERT_TRUE(r.fetch->end_step().ok());
  r.expect_every_byte();
}

TEST(Prefetch, ADivergenceReSynchronizesAndIsLoggedOncePerStep) {
  rig r("sim:capacity=8MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(6, 2 * mib);
  ASSERT_TRUE(r.step(true).ok());
  r.add(1, 4096);  // never in the order
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(r.fetch->begin_step().ok());
  // 0, 1, then 4 (skipping 2 and 3), an unrecorded buffer, then 2: two
  // re-syncs, one unrecorded, one line of log.
  for (const std::size_t k : {0, 1, 4}) ASSERT_TRUE(r.use(k).ok());
  ASSERT_TRUE(r.use(r.handles.size() - 1, true).ok());
  for (const std::size_t k : {2, 3, 5}) ASSERT_TRUE(r.use(k).ok());
  ASSERT_TRUE(r.fetch->end_step().ok());
  const std::string log = ::testing::internal::GetCapturedStderr();
  const auto c = r.fetch->stats();
  EXPECT_GE(c.resyncs, 2u);
  EXPECT_EQ(c.unrecorded, 1u);
  EXPECT_NE(log.find("acquire of buffer " + std::to_string(r.handles[4]) +
                     " where the order has buffer " + std::to_string(r.handles[2])),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("strata: prefetch"), log.rfind("strata: prefetch")) << "logged twice: " << log;
  // The order is kept: the next step in order prefetches again.
  const auto before = r.fetch->stats();
  ASSERT_TRUE(r.fetch->begin_step().ok());
  for (std::size_t k = 0; k < 6; ++k) ASSERT_TRUE(r.use(k).ok());
  for (std::size_t k = 6; k-- > 0;) ASSERT_TRUE(r.use(k).ok());
  ASSERT_TRUE(r.fetch->end_step().ok());
  const auto after = r.fetch->stats();
  EXPECT_EQ(after.in_order - before.in_order, 12u);
  EXPECT_GT(after.hits, before.hits);
  r.expect_every_byte();
}

TEST(Prefetch, AHintWorksWithoutARecordedOrder) {
  rig r("sim:capacity=8MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(5, 2 * mib);
  for (std::size_t k = 0; k < 5; ++k) ASSERT_TRUE(r.use(k, true).ok());  // no steps at all
  ASSERT_EQ(*r.manager->where(r.handles[0]), tier::host);
  ASSERT_TRUE(r.fetch->prefetch(r.handles[0]).ok());
  EXPECT_EQ(*r.manager->where(r.handles[0]), tier::device);
  ASSERT_TRUE(r.alloc->dev().synchronize().ok());  // the copy is done: a hit, not a late fill
  ASSERT_TRUE(r.use(0).ok());
  const auto c = r.fetch->stats();
  EXPECT_EQ(c.hints, 1u);
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(r.fetch->prefetch(999).code(), errc::invalid_argument);
  r.expect_every_byte();
}

TEST(Prefetch, CountersReachTheAllocatorStatsAndSummary) {
  rig r("sim:capacity=8MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(6, 2 * mib);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.step(i == 0).ok());
  const stat_map all = r.alloc->stats();
  ASSERT_TRUE(all.contains("prefetch.hits"));
  EXPECT_EQ(all.at("prefetch.hits"), static_cast<std::int64_t>(r.fetch->stats().hits));
  EXPECT_EQ(all.at("prefetch.steps"), 3);
  EXPECT_TRUE(all.contains("offload.late_fills"));
  EXPECT_TRUE(all.contains("offload.stall_ns"));
  const std::string summary = r.alloc->memory_summary();
  EXPECT_NE(summary.find("| prefetch"), std::string::npos) << summary;
  EXPECT_NE(summary.find("hits: "), std::string::npos) << summary;
  // Steps must pair.
  EXPECT_EQ(r.fetch->end_step().code(), errc::invalid_argument);
  ASSERT_TRUE(r.fetch->begin_step().ok());
  EXPECT_EQ(r.fetch->begin_step().code(), errc::invalid_argument);
  ASSERT_TRUE(r.fetch->end_step().ok());
  // The read-ahead to the host is the tiers' host_lookahead, one value
  // for the prefetcher and the write-behind.
  EXPECT_EQ(r.manager->host_lookahead(), 8 * mib);
  // Options out of range are refused, naming the key.
  prefetch_options bad = tiers(32 * mib, false).prefetch;
  bad.prefetch_inflight = 0;
  auto p = prefetcher::create(*r.manager, bad);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("prefetch_inflight"), std::string::npos)
      << p.error().message();
}

TEST(Prefetch, ThreadsShareThePrefetcher) {
  rig r("sim:capacity=16MiB", tiers(32 * mib, false));
  ASSERT_TRUE(r.fetch);
  r.add(6, 2 * mib);
  std::vector<std::uint64_t> others;
  for (int i = 0; i < 4; ++i) {
    others.push_back(
        *r.manager->register_buffer(mib, buffer_kind::gradient, residency_policy::evictable));
  }
  std::atomic<bool> stop{false};
  std::thread side([&] {
    const stream_handle s = *r.alloc->dev().create_stream();
    std::mt19937 rng(seed + 1);
    while (!stop.load()) {
      const std::uint64_t h = others[rng() % others.size()];
      EXPECT_TRUE(r.fetch->prefetch(h).ok());
      auto p = r.fetch->acquire(h, s.native);
      ASSERT_TRUE(p.ok()) << p.error().to_string();
      EXPECT_TRUE(r.fetch->release(h, s.native).ok());
      (void)r.alloc->stats();
      (void)r.alloc->memory_summary();
    }
    EXPECT_TRUE(r.alloc->dev().synchronize_stream(s).ok());
  });
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.step(i == 0).ok());
  stop.store(true);
  side.join();
  r.expect_every_byte();
  for (const auto h : others) EXPECT_TRUE(r.manager->unregister(h).ok());
}

// Counters are named once (strata/counter_list.hpp): each struct holds
// exactly its list's members, and its map has each under the member's name,
// with its value. The names users read stay as they were.
TEST(Counters, EachStructsMapHasEveryMemberUnderItsName) {
  STRATA_EXPECT_COUNTERS_NAMED_ONCE(prefetcher::counters, STRATA_PREFETCHER_COUNTERS);
  STRATA_EXPECT_COUNTERS_NAMED_ONCE(residency_manager::counters, STRATA_RESIDENCY_COUNTERS);
  const stat_map prefetch = prefetcher::counters{}.to_map();
  EXPECT_TRUE(prefetch.contains("hits") && prefetch.contains("late_fills") &&
              prefetch.contains("gathers_ahead"));
  const stat_map offload = residency_manager::counters{}.to_map();
  EXPECT_TRUE(offload.contains("spills_to_nvme") && offload.contains("writebacks_dropped"));
  // The allocator's plain counters (signed, beside its stat arrays).
  allocator_stats a;
  std::int64_t n = 0;
#define STRATA_TEST_SET(name, what) a.name = ++n;
  STRATA_ALLOCATOR_COUNTERS(STRATA_TEST_SET)
#undef STRATA_TEST_SET
  const stat_map m = a.to_map();
#define STRATA_TEST_CHECK(name, what) EXPECT_EQ(m.at(#name), a.name) << #name;
  STRATA_ALLOCATOR_COUNTERS(STRATA_TEST_CHECK)
#undef STRATA_TEST_CHECK
  EXPECT_TRUE(m.contains("num_ooms") && m.contains("device_wait_ns"));
  EXPECT_TRUE(m.contains("allocated_bytes.all.peak") &&
              m.contains("inactive_split_bytes.large_pool.freed"));
}

}  // namespace
}  // namespace strata::testing
