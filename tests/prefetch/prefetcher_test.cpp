// The prefetcher over a residency manager on a small sim device: learned
// order, fetches ahead through the host and the NVMe tier, divergence and
// re-sync, hints without an order, memory pressure, faults at every stage
// of a fetch (each loses no byte), no wait on the issuing thread, threads,
// and the counters in the allocator's stats. Random choices use a fixed
// seed, printed with any failure.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "../counter_names.hpp"
#include "strata/nvme_store.hpp"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr unsigned seed = 20261123;

std::string scratch() {
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

setup tiers(std::size_t host_capacity, bool with_nvme, bool write_behind = true) {
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
    options.device = sim;
    options.log_ooms = false;  // the fault cases make spills fail on purpose
    alloc = std::make_unique<allocator>(options);
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

// Reads ahead into a small host tier must leave an acquire's own fill the
// room to stream through: before they did, a host tier full of reads in
// flight (no victims) made an acquire fail with "no pinned memory" (seen
// with strata_torch.offload's Adam state).
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

// Holds every NVMe read of a prefetch until released, or fails the nth.
class gated_reads : public io_faults {
 public:
  // Gates and faults only the reader thread's reads (a prefetch's), not
  // those of the test's thread (fills, read-backs of spills). Its rigs turn
  // write-behind off (tiers(..., false)): the read-back of a write-behind,
  // on the same thread, would take the fault meant for a prefetch.
  int complete(io_kind k, std::uint64_t /*offset*/, void* buffer, std::size_t length,
               int r) override {
    if (k != io_kind::read || std::this_thread::get_id() == test_thread) return r;
    std::unique_lock lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    if (corrupt_next) {
      corrupt_next = false;
      static_cast<unsigned char*>(buffer)[length / 2] ^= 1;
    }
    if (fail_next) {
      fail_next = false;
      return -EIO;
    }
    return r;
  }
  void set_open(bool o) {
    std::lock_guard lock(mu);
    open = o;
    cv.notify_all();
  }
  // Waits until `n` gated reads have reached the disk, at most `limit`.
  bool wait_arrived(int n, std::chrono::seconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return arrived >= n; });
  }
  std::thread::id test_thread = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int arrived = 0;  // gated reads that reached the disk
  bool corrupt_next = false;
  bool fail_next = false;
};

TEST(Prefetch, NoFillIsWaitedForOnTheThreadThatIssuedIt) {
  gated_reads gate;
  rig r("sim:capacity=8MiB,copy_latency_us=20000", tiers(4 * mib, true, false), &gate);
  ASSERT_TRUE(r.fetch);
  r.add(8, 2 * mib);  // 16 MiB: 8 on the device, 4 on the host, 4 on NVMe
  for (std::size_t k = 0; k < 8; ++k) ASSERT_TRUE(r.use(k, true).ok());
  std::size_t on_host = 8;
  std::size_t on_nvme = 8;
  for (std::size_t k = 0; k < 8; ++k) {
    const tier t = *r.manager->where(r.handles[k]);
    if (t == tier::host && on_host == 8) on_host = k;
    if (t == tier::nvme && on_nvme == 8) on_nvme = k;
  }
  ASSERT_LT(on_host, 8u);
  ASSERT_LT(on_nvme, 8u);
  // A host fill: prefetch returns with the slow copy still in flight.
  const status hinted_host = r.fetch->prefetch(r.handles[on_host]);
  ASSERT_TRUE(hinted_host.ok()) << hinted_host.to_string();
  EXPECT_EQ(r.manager->stats().fills_in_flight, 1u) << "prefetch waited for its copy";
  ASSERT_TRUE(r.use(on_host).ok());
  // An NVMe fill: the read is held at the disk, and prefetch still returns.
  ASSERT_TRUE(r.alloc->dev().synchronize().ok());
  (void)r.manager->stats();  // retires the finished copy
  gate.set_open(false);
  const status hinted = r.fetch->prefetch(r.handles[on_nvme]);
  const auto during = r.manager->stats();
  gate.set_open(true);
  ASSERT_TRUE(hinted.ok()) << hinted.to_string();
  EXPECT_EQ(during.prefetch_reads, 1u);
  EXPECT_EQ(during.fills_in_flight, 1u) << "the read was not in flight when prefetch returned";
  ASSERT_TRUE(r.use(on_nvme).ok());
  r.expect_every_byte();
}

// An acquire of a buffer on NVMe hands its read to the reader thread and
// takes its device memory while the read is in flight: where making room
// waits for the GPU to finish with released buffers (a step's turn), the
// disk works meanwhile. (It used to take the room first and then read on
// its own thread.) The gate holds reader-thread reads, so the acquire,
// made on the test's thread, returns only once the gate saw its read.
TEST(Prefetch, AnAcquiresOwnReadOverlapsTakingDeviceRoom) {
  gated_reads gate;
  rig r("sim:capacity=18MiB", tiers(16 * mib, true, false), &gate);
  ASSERT_TRUE(r.fetch);
  r.add(12, 4 * mib);  // 48 MiB: at most 4 on the device, 4 on the host
  for (std::size_t k = 0; k < 12; ++k) ASSERT_TRUE(r.use(k, true).ok());
  ASSERT_TRUE(r.alloc->dev().synchronize().ok());
  r.manager->spill(SIZE_MAX);
  std::size_t on_nvme = 12;
  for (std::size_t k = 0; k < 12 && on_nvme == 12; ++k) {
    if (*r.manager->where(r.handles[k]) == tier::nvme) on_nvme = k;
  }
  ASSERT_LT(on_nvme, 12u);
  const auto before = r.manager->stats();
  gate.set_open(false);
  bool read_by_reader = false;
  std::thread opener([&] {
    read_by_reader = gate.wait_arrived(1, std::chrono::seconds(10));
    gate.set_open(true);
  });
  auto got = r.manager->acquire(r.handles[on_nvme], r.stream.native);
  opener.join();
  EXPECT_TRUE(read_by_reader) << "the acquire read on its own thread, after taking room";
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_TRUE(r.alloc->dev().synchronize_stream(r.stream).ok());
  EXPECT_EQ(std::memcmp(*got, r.bytes[on_nvme].data(), r.bytes[on_nvme].size()), 0);
  ASSERT_TRUE(r.manager->release(r.handles[on_nvme], r.stream.native).ok());
  const auto after = r.manager->stats();
  EXPECT_EQ(after.prefetch_reads, before.prefetch_reads) << "an acquire's read is no prefetch";
  EXPECT_EQ(after.late_fills, before.late_fills + 1);
  EXPECT_EQ(after.fills_from_nvme, before.fills_from_nvme + 1);
  r.expect_every_byte();
}

TEST(Prefetch, AFailedPrefetchReadReachesTheAcquireAndTheBytesStayOnNvme) {
  for (const bool corrupt : {true, false}) {
    SCOPED_TRACE(corrupt ? "corrupted read" : "EIO");
    gated_reads gate;
    rig r("sim:capacity=8MiB", tiers(4 * mib, true, false), &gate);
    ASSERT_TRUE(r.fetch);
    r.add(8, 2 * mib);
    for (std::size_t k = 0; k < 8; ++k) ASSERT_TRUE(r.use(k, true).ok());
    std::size_t on_nvme = 8;
    for (std::size_t k = 0; k < 8 && on_nvme == 8; ++k) {
      if (*r.manager->where(r.handles[k]) == tier::nvme) on_nvme = k;
    }
    ASSERT_LT(on_nvme, 8u);
    {
      std::lock_guard lock(gate.mu);
      (corrupt ? gate.corrupt_next : gate.fail_next) = true;
    }
    ASSERT_TRUE(r.fetch->prefetch(r.handles[on_nvme]).ok()) << "issuing does not wait for the read";
    auto p = r.fetch->acquire(r.handles[on_nvme], r.stream.native);
    ASSERT_FALSE(p.ok()) << "the failed read was not reported";
    EXPECT_EQ(p.code(), errc::io_error) << p.error().to_string();
    EXPECT_EQ(*r.manager->where(r.handles[on_nvme]), tier::nvme);
    EXPECT_EQ(r.manager->stats().prefetch_failed, 1u);
    ASSERT_TRUE(r.use(on_nvme).ok()) << "the bytes on NVMe are whole";
    r.expect_every_byte();
  }
}

// A buffer larger than the host tier is prefetched too: streamed NVMe ->
// device chunk by chunk on the reader thread (prefetch returns with the
// read held at the disk), on the device when acquired; a corrupted or
// failed streamed read reaches the acquire and the bytes stay on NVMe.
TEST(Prefetch, BuffersLargerThanTheHostTierStreamAhead) {
  for (const int fault : {0, 1, 2}) {
    SCOPED_TRACE(fault == 0 ? "no fault" : fault == 1 ? "corrupted read" : "EIO");
    gated_reads gate;
    rig r("sim:capacity=24MiB", tiers(4 * mib, true, false), &gate);  // 1 MiB staging chunks
    ASSERT_TRUE(r.fetch);
    r.add(3, 10 * mib + 4097);  // 2 fit the device, none the host
    for (std::size_t k = 0; k < 3; ++k) ASSERT_TRUE(r.use(k, true).ok());
    ASSERT_EQ(*r.manager->where(r.handles[0]), tier::nvme);
    gate.set_open(false);
    {
      std::lock_guard lock(gate.mu);
      gate.corrupt_next = fault == 1;
      gate.fail_next = fault == 2;
    }
    auto issued = r.manager->prefetch(r.handles[0], tier::device, 0);
    ASSERT_TRUE(issued.ok()) << issued.error().to_string();
    EXPECT_EQ(*issued, prefetch_outcome::started);
    const auto during = r.manager->stats();
    gate.set_open(true);
    EXPECT_EQ(during.fills_in_flight, 1u) << "prefetch waited for the streamed read";
    EXPECT_EQ(during.prefetch_reads, 1u);
    if (fault != 0) {
      auto p = r.fetch->acquire(r.handles[0], r.stream.native);
      ASSERT_FALSE(p.ok()) << "the failed streamed read was not reported";
      EXPECT_EQ(p.code(), errc::io_error) << p.error().to_string();
      EXPECT_EQ(*r.manager->where(r.handles[0]), tier::nvme);
      EXPECT_EQ(r.manager->stats().prefetch_failed, 1u);
    }
    ASSERT_TRUE(r.use(0).ok()) << "the bytes on NVMe are whole";
    const auto after = r.manager->stats();
    EXPECT_EQ(after.host_bytes, 0u) << "no buffer fits the host tier";
    EXPECT_EQ(after.fills_in_flight, 0u);
    r.expect_every_byte();
  }
}

// Fails the nth NVMe read (EIO) or corrupts it.
class nth_read : public io_faults {
 public:
  explicit nth_read(int n, bool corrupt) : left_(n), corrupt_(corrupt) {}
  int complete(io_kind k, std::uint64_t /*offset*/, void* buffer, std::size_t length,
               int r) override {
    if (k != io_kind::read || left_ <= 0 || --left_ > 0) return r;
    fired = true;
    if (!corrupt_) return -EIO;
    static_cast<unsigned char*>(buffer)[length / 3] ^= 1;
    return r;
  }
  std::atomic<bool> fired{false};

 private:
  std::atomic<int> left_;
  bool corrupt_;
};

TEST(Prefetch, FaultsAtEveryStageOfAFetchLoseNoByte) {
  struct fault_case {
    std::string sim;
    int nth_read;  // 0: none
    bool corrupt;
  };
  std::vector<fault_case> cases;
  for (const int n : {1, 9}) {
    cases.push_back({"sim:capacity=8MiB", n, false});
    cases.push_back({"sim:capacity=8MiB", n + 1, true});
  }
  for (const int n : {20, 47}) {
    cases.push_back({"sim:capacity=8MiB,fail_copy_after=" + std::to_string(n), 0, false});
  }
  for (const fault_case& f : cases) {
    SCOPED_TRACE(f.sim + " read " + std::to_string(f.nth_read) + (f.corrupt ? " corrupt" : ""));
    nth_read fault(f.nth_read, f.corrupt);
    rig r(f.sim, tiers(8 * mib, true), &fault);
    ASSERT_TRUE(r.fetch);
    r.add(10, 2 * mib);
    int failures = 0;
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(r.fetch->begin_step().ok());
      for (std::size_t i = 0; i < 20; ++i) {
        const std::size_t k = i < 10 ? i : 19 - i;
        const bool first = step == 0 && i < 10;
        status st = r.use(k, first);
        if (!st) {  // the fault fails this use; the buffer stays whole
          ++failures;
          EXPECT_NE(st.message(), "");
          st = r.use(k, first);
          ASSERT_TRUE(st.ok()) << st.to_string();
        }
      }
      ASSERT_TRUE(r.fetch->end_step().ok());
    }
    if (f.nth_read > 0) {
      EXPECT_TRUE(fault.fired) << "the read fault never fired";
    }
    EXPECT_LE(failures, 1);
    r.expect_every_byte();
  }
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
