// acquire_host/release_host: a buffer held on the host for the host's own
// work. A seeded random mix of device uses, read-only device reads and host
// uses over every tier keeps every byte (a host write must never be undone
// by a copy kept below it); the rules of holds (exclusive with device
// acquires, nested, not pinned_on_device) are errors that say so; a held
// buffer neither spills nor is pushed on to NVMe; an nvme_home buffer goes
// home at its last host release; a hold that finds the host tier full of
// reads in flight waits for them to land instead of failing; room made in a
// full host tier comes from a buffer whose pinned memory the new one can
// take over.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "residency_setup.hpp"
#include "strata/nvme_store.hpp"

namespace strata::testing {
namespace {

// Holds buffer k on the host, checks its bytes (after its first use),
// writes new ones, lets it go.
status use_on_host(model& md, std::size_t k, bool first) {
  auto p = md.m.acquire_host(md.handles[k]);
  if (!p) return p.error();
  if (md.m.where(md.handles[k]).value() != tier::host) {
    ADD_FAILURE() << "buffer " << k << " is held on the host but not there";
  }
  if (!first && std::memcmp(*p, md.bytes[k].data(), md.bytes[k].size()) != 0) {
    ADD_FAILURE() << "buffer " << k << " lost its bytes on the way to the host";
  }
  for (std::size_t i = 0; i < md.bytes[k].size(); i += 4096) {
    md.bytes[k][i] = static_cast<unsigned char>(md.rng());
  }
  std::memcpy(*p, md.bytes[k].data(), md.bytes[k].size());
  return md.m.release_host(md.handles[k]);
}

TEST(HostAccess, RandomUseOnTheHostAndTheDeviceKeepsEveryByte) {
  random_buffers r;
  ASSERT_TRUE(r.md);
  setup& s = r.s;
  model& md = *r.md;
  SCOPED_TRACE("seed 20261122");
  for (std::size_t k = 0; k < md.handles.size(); ++k) {
    // Half start on the host (fresh host memory), half on the device.
    const status st = k % 2 == 0 ? use_on_host(md, k, true) : md.use(k, s.streams[0], true);
    ASSERT_TRUE(st.ok()) << k << ": " << st.to_string();
  }
  for (int op = 0; op < 400; ++op) {
    const std::size_t k = md.rng() % md.handles.size();
    const unsigned how = md.rng() % 3;
    if (how == 2) {  // read only: keeps the copies below, which a host write must drop
      md.read(k, s.streams[op % 2]);
      continue;
    }
    const status st = how == 0 ? use_on_host(md, k, false) : md.use(k, s.streams[op % 2], false);
    ASSERT_TRUE(st.ok()) << "op " << op << ": " << st.to_string();
  }
  for (std::size_t k = 0; k < md.handles.size(); ++k) md.read(k, s.streams[0]);
  const auto c = s.manager->stats();
  EXPECT_GT(c.spills_to_host, 0u);
  EXPECT_GT(c.spills_to_nvme, 0u);
  EXPECT_GT(c.fills_from_nvme, 0u);
  std::size_t total = 0;
  for (const auto& b : md.bytes) total += b.size();
  EXPECT_EQ(c.device_bytes + c.host_bytes + c.nvme_bytes, total);
  for (const auto h : md.handles) ASSERT_TRUE(s.manager->unregister(h).ok());
}

TEST(HostAccess, HoldsFollowTheRulesAndSayWhy) {
  auto s = make("sim:capacity=8MiB", small_tiers());
  ASSERT_TRUE(s.manager);
  residency_manager& m = *s.manager;
  const auto message = [](const status& st) { return st.message(); };
  EXPECT_EQ(m.acquire_host(42).code(), errc::invalid_argument);
  EXPECT_EQ(m.release_host(42).code(), errc::invalid_argument);
  auto pinned = m.register_buffer(mib, buffer_kind::parameter, residency_policy::pinned_on_device);
  ASSERT_TRUE(pinned.ok());
  auto held = m.acquire_host(*pinned);
  ASSERT_FALSE(held.ok());
  EXPECT_NE(message(held.error()).find("pinned on the device"), std::string::npos);

  auto h = m.register_buffer(2 * mib, buffer_kind::optimizer_state, residency_policy::evictable);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(m.acquire(*h, nullptr).ok());
  held = m.acquire_host(*h);
  ASSERT_FALSE(held.ok()) << "held on the device and the host at once";
  EXPECT_NE(message(held.error()).find("acquired on the device"), std::string::npos);
  ASSERT_TRUE(m.release(*h, nullptr).ok());
  EXPECT_EQ(m.release_host(*h).code(), errc::invalid_argument) << "not held on the host";

  auto first = m.acquire_host(*h);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(*m.where(*h), tier::host) << "came up off the device";
  auto again = m.acquire_host(*h, access_mode::read_only);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first) << "holds nest on the same bytes";
  auto on_device = m.acquire(*h, nullptr);
  ASSERT_FALSE(on_device.ok());
  EXPECT_NE(message(on_device.error()).find("acquired on the host"), std::string::npos);
  const status released = m.release(*h, nullptr);
  EXPECT_NE(released.message().find("release_host ends that"), std::string::npos);
  EXPECT_EQ(m.unregister(*h).code(), errc::invalid_argument) << "still held";

  // Held, it stays on the host while others crowd the 8 MiB host tier
  // (the rest goes to NVMe) and a plain allocation takes the device.
  std::vector<std::uint64_t> others;
  for (int i = 0; i < 6; ++i) {
    others.push_back(
        *m.register_buffer(2 * mib, buffer_kind::gradient, residency_policy::evictable));
    ASSERT_TRUE(m.acquire(others.back(), nullptr).ok());
    ASSERT_TRUE(m.release(others.back(), nullptr).ok());
  }
  auto big = s.alloc->try_malloc(7 * mib);
  ASSERT_TRUE(big.ok()) << big.error().to_string();
  EXPECT_EQ(*m.where(*h), tier::host);
  EXPECT_GT(m.stats().spills_to_nvme, 0u) << "the host tier overflowed around the held buffer";
  EXPECT_TRUE(s.alloc->try_free(*big).ok());
  ASSERT_TRUE(m.release_host(*h).ok());
  ASSERT_TRUE(m.release_host(*h).ok());
  EXPECT_TRUE(m.acquire(*h, nullptr).ok()) << "movable again after the last release";
  EXPECT_TRUE(m.release(*h, nullptr).ok());
}

// A prefetch under way (an NVMe read, or a copy to the device) when the
// host holds the buffer ends with the buffer on the host, its bytes whole,
// and nothing left counted as headed for the device.
TEST(HostAccess, APrefetchUnderWayEndsOnTheHost) {
  auto s = make("sim:capacity=16MiB", small_tiers());
  ASSERT_TRUE(s.manager);
  model md(*s.manager, s.alloc->dev());
  for (int i = 0; i < 14; ++i) md.add(2 * mib);  // 28 MiB: 16 on the device, 8 host, the rest NVMe
  for (std::size_t k = 0; k < md.handles.size(); ++k) {
    ASSERT_TRUE(md.use(k, s.streams[0], true).ok()) << k;
  }
  for (const tier from : {tier::nvme, tier::host}) {
    std::size_t k = 0;
    while (k < md.handles.size() && md.m.where(md.handles[k]).value() != from) ++k;
    ASSERT_LT(k, md.handles.size()) << "no buffer on tier " << static_cast<int>(from);
    auto started = md.m.prefetch(md.handles[k], tier::device, 1);
    ASSERT_TRUE(started.ok()) << started.error().to_string();
    const status st = use_on_host(md, k, false);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(md.m.where(md.handles[k]).value(), tier::host);
    EXPECT_EQ(md.m.stats().prefetched_bytes, 0u) << "from tier " << static_cast<int>(from);
    md.read(k, s.streams[0]);
  }
}

TEST(HostAccess, AnNvmeHomeBufferGoesHomeAtItsLastHostRelease) {
  auto s = make("sim:capacity=8MiB", small_tiers());
  ASSERT_TRUE(s.manager);
  residency_manager& m = *s.manager;
  auto h = m.register_buffer(mib, buffer_kind::optimizer_state, residency_policy::nvme_home);
  ASSERT_TRUE(h.ok());
  auto p = m.acquire_host(*h);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  std::memset(*p, 0x5a, mib);
  ASSERT_TRUE(m.release_host(*h).ok());
  EXPECT_EQ(*m.where(*h), tier::nvme);
  auto back = m.acquire_host(*h, access_mode::read_only);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(static_cast<const unsigned char*>(*back)[mib - 1], 0x5a);
  ASSERT_TRUE(m.release_host(*h).ok());
  EXPECT_EQ(*m.where(*h), tier::nvme) << "an unwritten hold goes home with no write";
}

// Holds the NVMe store's reads on the reader thread until opened.
class read_gate final : public io_faults {
 public:
  int complete(io_kind kind, std::uint64_t /*offset*/, void* /*buffer*/, std::size_t /*length*/,
               int result) override {
    if (kind != io_kind::read) return result;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    return result;
  }
  void set(bool open) {
    {
      std::lock_guard lock(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// The prefetcher's reads ahead are no victims: a host tier they fill (next
// to a host_only buffer) has no room for a hold until they land. The hold
// waits for them; before, it failed with "no pinned memory".
TEST(HostAccess, AHoldWaitsForReadsInFlightToLand) {
  read_gate gate;
  tier_options o = small_tiers();
  o.host_capacity = 16 * mib;  // reads in flight may take all but two 4 MiB staging chunks
  auto s = make("sim:capacity=8MiB", o, &gate);
  // Opened before the manager goes, whatever fails: its reader must end.
  struct reopen {
    explicit reopen(read_gate& gate) : g(gate) {}
    read_gate& g;
    reopen(const reopen&) = delete;
    reopen& operator=(const reopen&) = delete;
    reopen(reopen&&) = delete;
    reopen& operator=(reopen&&) = delete;
    ~reopen() { g.set(true); }
  } reopen_at_exit{gate};
  ASSERT_TRUE(s.manager);
  residency_manager& m = *s.manager;
  for (const std::size_t bytes : {2 * mib, 2 * mib, 2 * mib, mib}) {  // 7 MiB kept on the host
    auto kept = m.register_buffer(bytes, buffer_kind::other, residency_policy::host_only);
    ASSERT_TRUE(kept.ok());
    ASSERT_TRUE(m.acquire_host(*kept).ok());
    ASSERT_TRUE(m.release_host(*kept).ok());
  }
  std::vector<std::uint64_t> homed;  // on NVMe after their last release
  for (int i = 0; i < 5; ++i) {
    auto h = m.register_buffer(2 * mib, buffer_kind::optimizer_state, residency_policy::nvme_home);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(m.acquire_host(*h).ok());
    ASSERT_TRUE(m.release_host(*h).ok());
    ASSERT_EQ(*m.where(*h), tier::nvme);
    homed.push_back(*h);
  }
  gate.set(false);
  for (int i = 0; i < 4; ++i) {  // 8 MiB read into the host tier
    auto r = m.prefetch(homed[i], tier::host, 0);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, prefetch_outcome::started) << "read " << i;
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.set(true);
  });
  auto held = m.acquire_host(homed[4]);
  opener.join();
  ASSERT_TRUE(held.ok()) << held.error().to_string();
  EXPECT_EQ(*m.where(homed[4]), tier::host);
  ASSERT_TRUE(m.release_host(homed[4]).ok());
}

// A full host tier makes room for a 3 MiB buffer. The least recently used
// buffers are 1 MiB ones: sending them to NVMe would free pinned buffers the
// new one cannot use (on a GPU, a cuMemFreeHost each, which may wait for the
// whole device, and a cuMemHostAlloc). The 3 MiB buffer released after them
// goes instead, and the new one takes over its pinned memory: no pinned
// host call at all. (Until 2026-11-27 the two oldest went: two frees and an
// allocation; the offload test made 70 such calls a step, 22 now.)
TEST(HostAccess, MakingRoomFreesPinnedMemoryTheNewBufferCanTakeOver) {
  auto s = make("sim:capacity=64MiB", small_tiers());
  ASSERT_TRUE(s.manager);
  residency_manager& m = *s.manager;
  std::vector<std::uint64_t> h;
  for (const std::size_t n : {mib, mib, mib, mib, 3 * mib, 3 * mib}) {
    auto r = m.register_buffer(n, buffer_kind::optimizer_state, residency_policy::evictable);
    ASSERT_TRUE(r.ok());
    h.push_back(*r);
  }
  for (std::size_t k = 0; k < 5; ++k) {  // 7 MiB of the 8 MiB tier, released in order
    ASSERT_TRUE(m.acquire_host(h[k]).ok()) << k;
    ASSERT_TRUE(m.release_host(h[k]).ok()) << k;
  }
  const auto calls = [&] {
    const driver_call_totals t = s.alloc->dev().call_totals();
    return t[static_cast<std::size_t>(driver_call::host_alloc)].calls +
           t[static_cast<std::size_t>(driver_call::host_free)].calls;
  };
  const std::uint64_t before = calls();
  ASSERT_TRUE(m.acquire_host(h[5]).ok());
  EXPECT_EQ(calls(), before) << "no pinned memory freed or allocated";
  for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(*m.where(h[k]), tier::host) << k;
  EXPECT_EQ(*m.where(h[4]), tier::nvme);
  ASSERT_TRUE(m.release_host(h[5]).ok());
  for (const auto handle : h) ASSERT_TRUE(m.unregister(handle).ok());
}

}  // namespace
}  // namespace strata::testing
