// The prefetcher when reads are slow or fail: no fill is waited for on
// the thread that issued it, an acquire's own read overlaps taking device
// room, a failed read reaches the acquire, buffers larger than the host
// tier stream ahead, and faults at every stage of a fetch lose no byte.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "prefetch_rig.hpp"

namespace strata::testing {
namespace {

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

}  // namespace
}  // namespace strata::testing
