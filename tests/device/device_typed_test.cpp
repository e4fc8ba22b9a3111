// The device suite: the same behaviour checked on every device present.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <vector>

#include "device/device_kinds.hpp"

namespace strata::testing {
namespace {

template <class Kind>
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { open(Kind::open()); }

  void open(result<std::unique_ptr<device>> opened) {
    if (!opened) {
      if (Kind::required()) FAIL() << Kind::name << ": " << opened.error().to_string();
      GTEST_SKIP() << Kind::name
                   << " device not available, test skipped: " << opened.error().to_string();
    }
    dev_ = std::move(*opened);
    g_ = dev_->granularity();
  }
  // Closes the device first: the stand-in driver is reconfigured only while
  // no device is open.
  template <class Open>
  void reopen(Open open_kind) {
    dev_.reset();
    open(open_kind());
  }

  // Reserves `pages` pages, maps a fresh run over all of them, sets access.
  struct mapped {
    std::uintptr_t base;
    std::size_t bytes;
    page_run run;
  };
  mapped map_fresh(std::size_t pages) {
    auto base = dev_->reserve(pages * g_);
    EXPECT_TRUE(base.ok()) << base.error().to_string();
    auto run = dev_->create_pages(pages * g_);
    EXPECT_TRUE(run.ok()) << run.error().to_string();
    EXPECT_TRUE(dev_->map(*base, pages * g_, *run).ok());
    EXPECT_TRUE(dev_->set_access(*base, pages * g_).ok());
    return {*base, pages * g_, *run};
  }
  void unmap_all(const mapped& m) {
    EXPECT_TRUE(dev_->unmap(m.base, m.bytes).ok());
    EXPECT_TRUE(dev_->release_pages(m.run).ok());
    EXPECT_TRUE(dev_->free_reservation(m.base, m.bytes).ok());
  }

  std::unique_ptr<device> dev_;
  std::size_t g_ = 0;
};

using DeviceKinds = ::testing::Types<sim_kind, cuda_kind>;
TYPED_TEST_SUITE(DeviceTest, DeviceKinds);

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(i * 31 + seed);
  return v;
}

struct order_log {
  std::vector<int> seen;
  int next = 0;
};
struct order_step {
  order_log* log;
  int value;
};
void record_step(void* arg) {
  auto* s = static_cast<order_step*>(arg);
  s->log->seen.push_back(s->value);
}

TYPED_TEST(DeviceTest, StreamRunsWorkInFifoOrder) {
  auto& dev = *this->dev_;
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  order_log log;
  std::vector<order_step> steps(200);
  for (int i = 0; i < 200; ++i) {
    steps[i] = {&log, i};
    ASSERT_TRUE(dev.launch_host_fn(*s, record_step, &steps[i]).ok());
  }
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  std::vector<int> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(log.seen, expected);
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
}

struct callback_check {
  const unsigned char* host;
  std::vector<unsigned char> expected;
  bool matched = false;
};
void check_copy_done(void* arg) {
  auto* c = static_cast<callback_check*>(arg);
  c->matched = std::memcmp(c->host, c->expected.data(), c->expected.size()) == 0;
}

TYPED_TEST(DeviceTest, HostCallbackRunsAfterEarlierCopies) {
  auto& dev = *this->dev_;
  auto m = this->map_fresh(1);
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  auto in = pattern(this->g_, 5);
  std::vector<unsigned char> out(this->g_, 0);
  auto* d = reinterpret_cast<void*>(m.base);
  ASSERT_TRUE(dev.copy_async(d, in.data(), in.size(), copy_direction::host_to_device, *s).ok());
  ASSERT_TRUE(dev.copy_async(out.data(), d, out.size(), copy_direction::device_to_host, *s).ok());
  callback_check check{out.data(), in};
  ASSERT_TRUE(dev.launch_host_fn(*s, check_copy_done, &check).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  EXPECT_TRUE(check.matched) << "the callback ran before the copies it follows had finished";
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
  this->unmap_all(m);
}

TYPED_TEST(DeviceTest, CrossStreamWaitSeesTheWriteBeforeTheEvent) {
  this->dev_.reset();
  this->reopen(TypeParam::open_slow);
  if (!this->dev_) return;
  auto& dev = *this->dev_;
  auto m = this->map_fresh(4);
  auto a = dev.create_stream();
  auto b = dev.create_stream();
  auto ev = dev.create_event();
  ASSERT_TRUE(a.ok() && b.ok() && ev.ok());
  auto in = pattern(m.bytes, 9);
  std::vector<unsigned char> out(m.bytes, 0);
  auto* d = reinterpret_cast<void*>(m.base);
  ASSERT_TRUE(dev.copy_async(d, in.data(), in.size(), copy_direction::host_to_device, *a).ok());
  ASSERT_TRUE(dev.record_event(*ev, *a).ok());
  if (TypeParam::configurable()) {
    auto done = dev.query_event(*ev);
    ASSERT_TRUE(done.ok());
    EXPECT_FALSE(done.yes()) << "the slow stream finished an 8 MiB copy instantly";
  }
  ASSERT_TRUE(dev.stream_wait_event(*b, *ev).ok());
  ASSERT_TRUE(dev.copy_async(out.data(), d, out.size(), copy_direction::device_to_host, *b).ok());
  ASSERT_TRUE(dev.synchronize_stream(*b).ok());
  EXPECT_EQ(out, in) << "stream B read before stream A's write was done";
  auto done = dev.query_event(*ev);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.yes());
  EXPECT_TRUE(dev.destroy_event(*ev).ok());
  EXPECT_TRUE(dev.destroy_stream(*a).ok());
  EXPECT_TRUE(dev.destroy_stream(*b).ok());
  this->unmap_all(m);
}

TYPED_TEST(DeviceTest, EventNeverRecordedIsCompleteAndSynchronizeWaits) {
  this->dev_.reset();
  this->reopen(TypeParam::open_slow);
  if (!this->dev_) return;
  auto& dev = *this->dev_;
  auto ev = dev.create_event();
  ASSERT_TRUE(ev.ok());
  auto done = dev.query_event(*ev);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.yes());
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  std::atomic<int> ran{0};
  auto bump = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(dev.launch_host_fn(*s, bump, &ran).ok());
  ASSERT_TRUE(dev.record_event(*ev, *s).ok());
  ASSERT_TRUE(dev.synchronize_event(*ev).ok());
  EXPECT_EQ(ran.load(), 5);
  done = dev.query_event(*ev);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.yes());
  EXPECT_TRUE(dev.destroy_event(*ev).ok());
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
}

TYPED_TEST(DeviceTest, EveryCopyDirectionMovesTheBytes) {
  auto& dev = *this->dev_;
  auto m = this->map_fresh(2);
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  auto in = pattern(this->g_, 77);
  std::vector<unsigned char> out(this->g_, 0);
  auto* first = reinterpret_cast<void*>(m.base);
  auto* second = reinterpret_cast<void*>(m.base + this->g_);
  ASSERT_TRUE(dev.copy_async(first, in.data(), in.size(), copy_direction::host_to_device, *s).ok());
  ASSERT_TRUE(dev.copy_async(second, first, in.size(), copy_direction::device_to_device, *s).ok());
  ASSERT_TRUE(
      dev.copy_async(out.data(), second, out.size(), copy_direction::device_to_host, *s).ok());
  ASSERT_TRUE(dev.copy_async(out.data(), second, 0, copy_direction::device_to_host, *s).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
  this->unmap_all(m);
}

TYPED_TEST(DeviceTest, MemsetSetsExactlyTheRangeInStreamOrder) {
  auto& dev = *this->dev_;
  auto m = this->map_fresh(1);
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  auto in = pattern(this->g_, 5);
  std::vector<unsigned char> out(this->g_, 0);
  auto* d = reinterpret_cast<unsigned char*>(m.base);
  ASSERT_TRUE(dev.copy_async(d, in.data(), in.size(), copy_direction::host_to_device, *s).ok());
  // After the copy on the same stream: bytes [100, 100 + 4000) become 0xab.
  ASSERT_TRUE(dev.memset_async(d + 100, 0xab, 4000, *s).ok());
  ASSERT_TRUE(dev.memset_async(d, 0, 0, *s).ok());
  ASSERT_TRUE(dev.copy_async(out.data(), d, out.size(), copy_direction::device_to_host, *s).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  for (std::size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], i >= 100 && i < 4100 ? 0xab : in[i]) << "byte " << i;
  }
  EXPECT_EQ(dev.memset_async(nullptr, 0, 8, *s).code(), errc::invalid_argument);
  EXPECT_EQ(dev.memset_async(d, 256, 8, *s).code(), errc::invalid_argument);
  unsigned char host[8] = {};
  EXPECT_FALSE(dev.memset_async(host, 0, sizeof host, *s).ok());  // not device memory
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
  this->unmap_all(m);
}

TYPED_TEST(DeviceTest, CapacityIsEnforcedAndARefusedRunChangesNothing) {
  if (!TypeParam::configurable()) GTEST_SKIP() << "needs a device of configurable capacity";
  auto& dev = *this->dev_;
  auto before = dev.get_memory_info();
  ASSERT_TRUE(before.ok());
  std::vector<page_run> runs;
  while (true) {
    auto r = dev.create_pages(this->g_ * 4);
    if (!r) {
      EXPECT_EQ(r.code(), errc::out_of_memory) << r.error().to_string();
      EXPECT_NE(r.error().message().find("out of memory"), std::string::npos);
      break;
    }
    runs.push_back(*r);
    ASSERT_LT(runs.size(), 1000u) << "capacity never ran out";
  }
  auto full = dev.get_memory_info();
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->free, before->total - runs.size() * 4 * this->g_);
  auto refused = dev.create_pages(this->g_ * 4);
  EXPECT_FALSE(refused.ok());
  auto after = dev.get_memory_info();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->free, full->free) << "a refused create changed the free memory";
  ASSERT_TRUE(dev.release_pages(runs.back()).ok());
  runs.pop_back();
  auto again = dev.create_pages(this->g_ * 4);
  EXPECT_TRUE(again.ok()) << "released memory was not reusable";
  if (again) runs.push_back(*again);
  for (auto r : runs) EXPECT_TRUE(dev.release_pages(r).ok());
  auto end = dev.get_memory_info();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->free, before->free);
}

TYPED_TEST(DeviceTest, OnePageMappedTwiceShowsTheSameBytes) {
  auto& dev = *this->dev_;
  auto base = dev.reserve(4 * this->g_);
  auto run = dev.create_pages(this->g_);
  ASSERT_TRUE(base.ok() && run.ok());
  const std::uintptr_t a = *base;
  const std::uintptr_t b = *base + 2 * this->g_;
  ASSERT_TRUE(dev.map(a, this->g_, *run).ok());
  ASSERT_TRUE(dev.map(b, this->g_, *run).ok());
  ASSERT_TRUE(dev.set_access(a, this->g_).ok());
  ASSERT_TRUE(dev.set_access(b, this->g_).ok());
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  auto in = pattern(this->g_, 3);
  std::vector<unsigned char> out(this->g_, 0);
  ASSERT_TRUE(dev.copy_async(reinterpret_cast<void*>(a), in.data(), in.size(),
                             copy_direction::host_to_device, *s)
                  .ok());
  ASSERT_TRUE(dev.copy_async(out.data(), reinterpret_cast<void*>(b), out.size(),
                             copy_direction::device_to_host, *s)
                  .ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
  EXPECT_TRUE(dev.unmap(a, this->g_).ok());
  EXPECT_TRUE(dev.unmap(b, this->g_).ok());
  EXPECT_TRUE(dev.release_pages(*run).ok());
  EXPECT_TRUE(dev.free_reservation(*base, 4 * this->g_).ok());
}

TYPED_TEST(DeviceTest, PartialUnmapAndMapOutsideAReservationAreRefused) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  auto base = dev.reserve(4 * g);
  auto run = dev.create_pages(2 * g);
  ASSERT_TRUE(base.ok() && run.ok());
  ASSERT_TRUE(dev.map(*base, 2 * g, *run).ok());
  auto partial = dev.unmap(*base, g);
  EXPECT_FALSE(partial.ok());
  EXPECT_NE(partial.code(), errc::ok);
  auto tail = dev.unmap(*base + g, g);
  EXPECT_FALSE(tail.ok());
  auto outside = dev.map(*base + 3 * g, 2 * g, *run);
  EXPECT_FALSE(outside.ok()) << "a map running past the reservation's end was accepted";
  auto overlap = dev.map(*base + g, g, *run);
  EXPECT_FALSE(overlap.ok()) << "a map over an existing mapping was accepted";
  auto busy = dev.free_reservation(*base, 4 * g);
  EXPECT_FALSE(busy.ok()) << "a reservation with a live mapping was freed";
  EXPECT_TRUE(dev.unmap(*base, 2 * g).ok());
  EXPECT_TRUE(dev.release_pages(*run).ok());
  EXPECT_TRUE(dev.free_reservation(*base, 4 * g).ok());
}

TYPED_TEST(DeviceTest, ArgumentsThatAreNotGranularAreRefused) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  EXPECT_EQ(dev.reserve(0).code(), errc::invalid_argument);
  EXPECT_EQ(dev.reserve(g + 1).code(), errc::invalid_argument);
  EXPECT_EQ(dev.reserve(g, 3).code(), errc::invalid_argument);
  EXPECT_EQ(dev.create_pages(0).code(), errc::invalid_argument);
  auto odd = dev.create_pages(g / 2);
  EXPECT_EQ(odd.code(), errc::invalid_argument);
  EXPECT_NE(odd.error().message().find("granularity"), std::string::npos);
  auto base = dev.reserve(2 * g);
  auto run = dev.create_pages(g);
  ASSERT_TRUE(base.ok() && run.ok());
  EXPECT_EQ(dev.map(*base + 4096, g, *run).code(), errc::invalid_argument);
  EXPECT_EQ(dev.map(*base, 2 * g, *run).code(), errc::invalid_argument);
  EXPECT_EQ(dev.copy_async(nullptr, &g, 8, copy_direction::host_to_device, {}).code(),
            errc::invalid_argument);
  EXPECT_EQ(dev.launch_host_fn({}, nullptr, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(dev.destroy_stream({}).code(), errc::invalid_argument);
  EXPECT_TRUE(dev.release_pages(*run).ok());
  EXPECT_TRUE(dev.free_reservation(*base, 2 * g).ok());
}

TYPED_TEST(DeviceTest, ReleasedPagesLiveUntilTheirLastMappingIsGone) {
  auto& dev = *this->dev_;
  auto start = dev.get_memory_info();
  ASSERT_TRUE(start.ok());
  auto m = this->map_fresh(1);
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  auto in = pattern(this->g_, 11);
  std::vector<unsigned char> out(this->g_, 0);
  auto* d = reinterpret_cast<void*>(m.base);
  ASSERT_TRUE(dev.copy_async(d, in.data(), in.size(), copy_direction::host_to_device, *s).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  ASSERT_TRUE(dev.release_pages(m.run).ok());
  ASSERT_TRUE(dev.copy_async(out.data(), d, out.size(), copy_direction::device_to_host, *s).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  EXPECT_EQ(out, in) << "released but still mapped memory lost its bytes";
  ASSERT_TRUE(dev.unmap(m.base, m.bytes).ok());
  ASSERT_TRUE(dev.free_reservation(m.base, m.bytes).ok());
  if (TypeParam::configurable()) {
    auto end = dev.get_memory_info();
    ASSERT_TRUE(end.ok());
    EXPECT_EQ(end->free, start->free) << "memory did not return after the last unmap";
  }
  EXPECT_TRUE(dev.destroy_stream(*s).ok());
}

TYPED_TEST(DeviceTest, DestroyingAStreamWithQueuedWorkDrainsIt) {
  this->dev_.reset();
  this->reopen(TypeParam::open_slow);
  if (!this->dev_) return;
  auto& dev = *this->dev_;
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  std::atomic<int> ran{0};
  auto bump = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(dev.launch_host_fn(*s, bump, &ran).ok());
  ASSERT_TRUE(dev.destroy_stream(*s).ok());
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(ran.load(), 20) << "work queued before destroy_stream was dropped";
}

TYPED_TEST(DeviceTest, PinnedHostMemoryAndRegistration) {
  auto& dev = *this->dev_;
  auto p = dev.host_alloc(1 << 20);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  std::memset(*p, 0xab, 1 << 20);
  std::vector<unsigned char> buf(1 << 20);
  EXPECT_TRUE(dev.host_register(buf.data(), buf.size()).ok());
  EXPECT_FALSE(dev.host_register(buf.data(), buf.size()).ok()) << "double registration accepted";
  EXPECT_TRUE(dev.host_unregister(buf.data()).ok());
  EXPECT_FALSE(dev.host_unregister(buf.data()).ok()) << "double unregistration accepted";
  EXPECT_TRUE(dev.host_free(*p).ok());
  EXPECT_EQ(dev.host_alloc(0).code(), errc::invalid_argument);
  EXPECT_EQ(dev.host_free(nullptr).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace strata::testing
