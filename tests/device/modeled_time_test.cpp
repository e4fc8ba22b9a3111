// Modeled time on timing-only sim devices (docs/device.md, "Modeled time"):
// stream clocks, the host's clock, events between streams, modeled kernels
// and timed host functions; the time is modeled, not slept.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "strata/device.hpp"

namespace strata::testing {
namespace {

constexpr double gb = 1e9;

struct timing_device {
  explicit timing_device(
      const char* spec = "sim:capacity=64MiB,data=none,driver_costs=none,h2d_gbps=1,tflops=1") {
    auto d = open_device(spec);
    EXPECT_TRUE(d.ok()) << d.error().to_string();
    dev = std::move(*d);
    buffer.resize(std::size_t{64} << 20);
    auto base = dev->reserve(buffer.size());
    auto run = dev->create_pages(buffer.size());
    EXPECT_TRUE(base.ok() && run.ok());
    EXPECT_TRUE(dev->map(*base, buffer.size(), *run).ok());
    EXPECT_TRUE(dev->set_access(*base, buffer.size()).ok());
    device_memory = reinterpret_cast<void*>(*base);
  }
  stream_handle stream() {
    auto s = dev->create_stream();
    EXPECT_TRUE(s.ok());
    return *s;
  }
  double clock() {
    auto c = dev->modeled_clock();
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    return c.ok() ? *c : -1;
  }
  // A host-to-device copy of `bytes` (the host buffer is never read).
  void copy(double bytes, stream_handle s) {
    ASSERT_TRUE(dev->copy_async(device_memory, buffer.data(), static_cast<std::size_t>(bytes),
                                copy_direction::host_to_device, s)
                    .ok());
  }

  std::unique_ptr<device> dev;
  std::vector<unsigned char> buffer;
  void* device_memory = nullptr;
};

// 64 MiB at 10 MB/s is 6.7 modeled seconds, and the call does not take them.
TEST(ModeledTime, ACopyAdvancesTheModeledClockNotTheWallClock) {
  timing_device t(
      "sim:capacity=2GiB,data=none,driver_costs=none,h2d_gbps=0.01,copy_latency_us=100");
  EXPECT_EQ(t.clock(), 0.0);
  const auto wall = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.dev
                  ->copy_async(t.device_memory, t.buffer.data(), t.buffer.size(),
                               copy_direction::host_to_device, {})
                  .ok());
  EXPECT_EQ(t.clock(), 0.0) << "queuing moves no clock";
  ASSERT_TRUE(t.dev->synchronize_stream({}).ok());
  EXPECT_NEAR(t.clock(), static_cast<double>(t.buffer.size()) / (0.01 * gb) + 100e-6, 1e-9);
  EXPECT_LT(std::chrono::steady_clock::now() - wall, std::chrono::seconds(3))
      << "the modeled 6.7 s were slept";
}

// Two streams run side by side: the host waits for the longer one.
TEST(ModeledTime, StreamsOverlapAndTheHostReachesTheLaterOne) {
  timing_device t;
  const stream_handle copies = t.stream();
  const stream_handle compute = t.stream();
  t.copy(32e6, copies);                                             // 32 ms
  ASSERT_TRUE(t.dev->queue_modeled_kernel(compute, 50e9, 0).ok());  // 50 ms at 1 TFLOP/s
  ASSERT_TRUE(t.dev->queue_modeled_kernel(compute, 0, 1e9).ok());   // d2d instant: 0
  ASSERT_TRUE(t.dev->synchronize_stream(copies).ok());
  EXPECT_NEAR(t.clock(), 0.032, 1e-12);
  ASSERT_TRUE(t.dev->synchronize().ok());
  EXPECT_NEAR(t.clock(), 0.050, 1e-12);
  // Work queued now starts at the host's clock, not at its idle stream's.
  t.copy(10e6, copies);
  ASSERT_TRUE(t.dev->synchronize_stream(copies).ok());
  EXPECT_NEAR(t.clock(), 0.060, 1e-12);
}

// A stream that waits on an event starts its next work when the event's
// work ends; synchronizing or querying the event moves the host there.
TEST(ModeledTime, EventsCarryTheirModeledTimeAcrossStreams) {
  timing_device t;
  const stream_handle a = t.stream();
  const stream_handle b = t.stream();
  auto e = t.dev->create_event();
  ASSERT_TRUE(e.ok());
  t.copy(20e6, a);  // ends at 20 ms
  ASSERT_TRUE(t.dev->record_event(*e, a).ok());
  t.copy(30e6, a);  // ends at 50 ms, after the record
  ASSERT_TRUE(t.dev->stream_wait_event(b, *e).ok());
  ASSERT_TRUE(t.dev->queue_modeled_kernel(b, 5e9, 0).ok());  // 5 ms after 20 ms
  ASSERT_TRUE(t.dev->synchronize_event(*e).ok());
  EXPECT_NEAR(t.clock(), 0.020, 1e-12);
  ASSERT_TRUE(t.dev->synchronize_stream(b).ok());
  EXPECT_NEAR(t.clock(), 0.025, 1e-12) << "b waited for the event, not for a's later copy";
  ASSERT_TRUE(t.dev->record_event(*e, a).ok());
  // A query answers by modeled time: at 25 ms the copy ending at 50 ms is
  // not done, however far the stream's thread has got; once the host has
  // waited for it, it is.
  EXPECT_FALSE(t.dev->query_event(*e).yes());
  EXPECT_NEAR(t.clock(), 0.025, 1e-12) << "a query does not move the host's clock";
  ASSERT_TRUE(t.dev->synchronize_stream(a).ok());
  EXPECT_NEAR(t.clock(), 0.050, 1e-12);
  EXPECT_TRUE(t.dev->query_event(*e).yes());
}

// A timed host function is told its stream's time and sets when it goes on.
TEST(ModeledTime, ATimedHostFunctionSetsWhenItsStreamGoesOn) {
  timing_device t;
  const stream_handle s = t.stream();
  t.copy(10e6, s);
  double seen = -1;
  struct call {
    double* seen;
    static double run(void* arg, double start) {
      *static_cast<call*>(arg)->seen = start;
      return start + 0.5;
    }
    static double backwards(void* /*arg*/, double start) { return start - 1; }
  } c{&seen};
  ASSERT_TRUE(t.dev->launch_timed_host_fn(s, &call::run, &c).ok());
  ASSERT_TRUE(t.dev->launch_timed_host_fn(s, &call::backwards, nullptr).ok());
  ASSERT_TRUE(t.dev->synchronize_stream(s).ok());
  EXPECT_NEAR(seen, 0.010, 1e-12);
  EXPECT_NEAR(t.clock(), 0.510, 1e-12) << "a function cannot take time back";
}

TEST(ModeledTime, BadArgumentsAndDevicesWithoutModeledTimeAreRefused) {
  timing_device t;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(t.dev->queue_modeled_kernel({}, -1, 0).code(), errc::invalid_argument);
  EXPECT_EQ(t.dev->queue_modeled_kernel({}, 0, nan).code(), errc::invalid_argument);
  EXPECT_EQ(t.dev->queue_modeled_kernel({}, std::numeric_limits<double>::infinity(), 0).code(),
            errc::invalid_argument);
  EXPECT_EQ(t.dev->launch_timed_host_fn({}, nullptr, nullptr).code(), errc::invalid_argument);
  int unknown = 0;
  EXPECT_EQ(t.dev->queue_modeled_kernel(stream_handle{&unknown}, 1, 1).code(),
            errc::invalid_argument);

  auto with_data = open_device("sim:capacity=64MiB");
  ASSERT_TRUE(with_data.ok());
  EXPECT_EQ((*with_data)->modeled_clock().code(), errc::not_supported);
  EXPECT_EQ((*with_data)->queue_modeled_kernel({}, 1, 1).code(), errc::not_supported);
  auto refused = (*with_data)
                     ->launch_timed_host_fn(
                         {}, [](void*, double s) { return s; }, nullptr);
  EXPECT_EQ(refused.code(), errc::not_supported);
  EXPECT_NE(refused.message().find("data=none"), std::string::npos) << refused.message();
  EXPECT_EQ(open_device("sim:tflops=-1").code(), errc::invalid_argument);
  EXPECT_EQ(open_device("sim:tflops=fast").code(), errc::invalid_argument);
}

}  // namespace
}  // namespace strata::testing
