// What driver calls cost on the sim device (docs/device.md, "What driver
// calls cost"): the H100's measured prices by default, charged on the
// modeled clock of a timing-only device and slept on a device with data;
// every call counted with its time; and a GPU that runs behind the host, so
// that a host wait for queued work costs what it costs on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "strata/device.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t page = std::size_t{2} << 20;

std::unique_ptr<device> open_ok(const char* spec) {
  auto d = open_device(spec);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  return d.ok() ? std::move(*d) : nullptr;
}

double clock_of(device& d) {
  auto c = d.modeled_clock();
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? *c : -1;
}

const driver_call_total& total(const driver_call_totals& t, driver_call k) {
  return t[static_cast<std::size_t>(k)];
}

// A 4-page run costs each call's price once, plus the small per-page part
// of create, set_access and release for the 3 pages beyond the first, on the
// thread's modeled clock (the driver prices a call, not its bytes:
// bench/RESULTS.md, "the price is per call"); each call is counted with
// exactly that time.
TEST(DriverCosts, VirtualMemoryCallsChargeAPricePerCall) {
  auto d = open_ok("sim:capacity=64MiB,data=none");
  ASSERT_NE(d, nullptr);
  auto base = d->reserve(4 * page);
  ASSERT_TRUE(base.ok());
  const double start = clock_of(*d);
  auto run = d->create_pages(4 * page);
  ASSERT_TRUE(run.ok());
  const double create = 14.0e-6 + 3 * 0.13e-6;
  EXPECT_NEAR(clock_of(*d) - start, create, 1e-12);
  ASSERT_TRUE(d->map(*base, 4 * page, *run).ok());
  ASSERT_TRUE(d->set_access(*base, 4 * page).ok());
  const double open = create + 2.2e-6 + 30.0e-6 + 3 * 0.15e-6;
  EXPECT_NEAR(clock_of(*d) - start, open, 1e-12);
  ASSERT_TRUE(d->unmap(*base, 4 * page).ok());
  ASSERT_TRUE(d->release_pages(*run).ok());
  EXPECT_NEAR(clock_of(*d) - start, open + 30.0e-6 + 17.0e-6 + 3 * 1.2e-6, 1e-12);

  const driver_call_totals t = d->call_totals();
  EXPECT_EQ(total(t, driver_call::create_pages).calls, 1U);
  EXPECT_EQ(total(t, driver_call::map).calls, 1U);
  EXPECT_EQ(total(t, driver_call::set_access).calls, 1U);
  EXPECT_EQ(total(t, driver_call::unmap).calls, 1U);
  EXPECT_EQ(total(t, driver_call::release_pages).calls, 1U);
  EXPECT_EQ(total(t, driver_call::reserve).calls, 1U);
  EXPECT_NEAR(static_cast<double>(total(t, driver_call::set_access).ns), 30'000 + 3 * 150, 1);
  EXPECT_NEAR(static_cast<double>(total(t, driver_call::unmap).ns), 30'000, 1);
}

// set_access and unmap over a range of one-page mappings cost a call's
// price per mapping: the card's 2 MiB runs opened by one cuMemSetAccess over
// 1 GiB took 41 us a page, one 1 GiB run 0.23.
TEST(DriverCosts, SetAccessAndUnmapPayPerMappingInTheirRange) {
  auto d = open_ok("sim:capacity=64MiB,data=none");
  ASSERT_NE(d, nullptr);
  auto base = d->reserve(4 * page);
  ASSERT_TRUE(base.ok());
  std::vector<page_run> runs;
  for (std::size_t i = 0; i < 4; ++i) {
    auto run = d->create_pages(page);
    ASSERT_TRUE(run.ok());
    ASSERT_TRUE(d->map(*base + i * page, page, *run).ok());
    runs.push_back(*run);
  }
  const double start = clock_of(*d);
  ASSERT_TRUE(d->set_access(*base, 4 * page).ok());
  EXPECT_NEAR(clock_of(*d) - start, 4 * 30.0e-6, 1e-12);
  ASSERT_TRUE(d->unmap(*base, 4 * page).ok());
  EXPECT_NEAR(clock_of(*d) - start, 8 * 30.0e-6, 1e-12);
  for (const page_run& r : runs) ASSERT_TRUE(d->release_pages(r).ok());
}

// Pinned host memory calls are counted too (cuMemHostAlloc pins page by
// page, cuMemFreeHost may wait for the whole device), so a tier that churns
// pinned buffers shows it in the stats; they are not charged on the sim
// device (not measured yet). A refused call is counted as well.
TEST(DriverCosts, PinnedHostCallsAreCounted) {
  auto d = open_ok("sim:capacity=64MiB,data=none");
  ASSERT_NE(d, nullptr);
  auto a = d->host_alloc(page);
  auto b = d->host_alloc(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(d->host_free(*a).ok());
  int local = 0;
  EXPECT_EQ(d->host_free(&local).code(), errc::invalid_argument);
  EXPECT_EQ(d->host_alloc(0).code(), errc::invalid_argument) << "refused before the driver";
  const driver_call_totals t = d->call_totals();
  EXPECT_EQ(total(t, driver_call::host_alloc).calls, 2U);
  EXPECT_EQ(total(t, driver_call::host_free).calls, 2U);
  EXPECT_EQ(clock_of(*d), 0.0) << "not charged";
  EXPECT_STREQ(driver_call_name(driver_call::host_alloc), "host_alloc");
  EXPECT_STREQ(driver_call_name(driver_call::host_free), "host_free");
  EXPECT_EQ(memory_call_total(t).calls, 0U) << "not virtual-memory calls";
  ASSERT_TRUE(d->host_free(*b).ok());
}

// Each key sets its price; driver_costs=none zeroes those not given; a
// call on less than 2 MiB still costs one unit.
TEST(DriverCosts, KeysSetThePricesAndNoneTurnsTheRestOff) {
  auto d = open_ok("sim:capacity=64MiB,granularity=64KiB,data=none,driver_costs=none,map_us=5");
  ASSERT_NE(d, nullptr);
  auto base = d->reserve(page);
  auto run = d->create_pages(page);
  ASSERT_TRUE(base.ok() && run.ok());
  EXPECT_EQ(clock_of(*d), 0.0) << "create_pages is free with driver_costs=none";
  ASSERT_TRUE(d->map(*base, 65536, *run).ok());
  EXPECT_NEAR(clock_of(*d), 5e-6, 1e-12) << "a call costs its price, whatever its size";
  ASSERT_TRUE(d->map(*base + page / 2, page / 2, *run).ok());
  EXPECT_NEAR(clock_of(*d), 10e-6, 1e-12);
  EXPECT_FALSE(open_device("sim:driver_costs=free").ok());
  EXPECT_FALSE(open_device("sim:map_us=-1").ok());
  EXPECT_FALSE(open_device("sim:set_access_us=1e9").ok());
}

// Events cost their calibrated price; a GPU 12 ms behind completes an event
// 12 ms after the host recorded it: a query before then says no, and a
// wait moves the host's clock there.
TEST(DriverCosts, AGpuThatRunsBehindMakesAWaitCostTheLag) {
  auto d = open_ok("sim:capacity=64MiB,data=none,gpu_lag_us=12000");
  ASSERT_NE(d, nullptr);
  auto s = d->create_stream();
  auto e = d->create_event();
  ASSERT_TRUE(s.ok() && e.ok());
  ASSERT_TRUE(d->record_event(*e, *s).ok());
  EXPECT_NEAR(clock_of(*d), 1.7e-6, 1e-12);
  auto done = d->query_event(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(done.yes()) << "the GPU is 12 ms behind";
  EXPECT_NEAR(clock_of(*d), 3.6e-6, 1e-12);
  ASSERT_TRUE(d->synchronize_event(*e).ok());
  EXPECT_NEAR(clock_of(*d), 12e-3, 1e-12) << "the wait lasted until the GPU got there";
  done = d->query_event(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.yes());
  const driver_call_totals t = d->call_totals();
  EXPECT_EQ(total(t, driver_call::query_event).calls, 2U);
  EXPECT_EQ(total(t, driver_call::synchronize_event).calls, 1U);
  EXPECT_NEAR(static_cast<double>(total(t, driver_call::synchronize_event).ns), 12e6 - 3600, 2);
}

// On a device with data the prices are slept: the calling thread's
// host_clock moves by them at once, real time follows within a millisecond.
TEST(DriverCosts, ADeviceWithDataSleepsThePrices) {
  auto d = open_ok("sim:capacity=256MiB,set_access_us=0,set_access_page_us=1000");
  ASSERT_NE(d, nullptr);
  auto base = d->reserve(32 * page);
  auto run = d->create_pages(32 * page);
  ASSERT_TRUE(base.ok() && run.ok());
  ASSERT_TRUE(d->map(*base, 32 * page, *run).ok());
  const auto wall = std::chrono::steady_clock::now();
  const double before = d->host_clock();
  ASSERT_TRUE(d->set_access(*base, 32 * page).ok());
  EXPECT_GE(d->host_clock() - before, 31e-3);
  EXPECT_GE(std::chrono::steady_clock::now() - wall, std::chrono::milliseconds(30));
  EXPECT_GE(total(d->call_totals(), driver_call::set_access).ns, 31'000'000U);
}

// A GPU behind the host on a device with data: queued work runs no earlier
// than the lag after it was queued, in real time.
TEST(DriverCosts, ALaggingDeviceWithDataHoldsQueuedWorkBack) {
  auto d = open_ok("sim:capacity=64MiB,gpu_lag_us=20000");
  ASSERT_NE(d, nullptr);
  auto s = d->create_stream();
  ASSERT_TRUE(s.ok());
  const auto wall = std::chrono::steady_clock::now();
  ASSERT_TRUE(d->synchronize_stream(*s).ok()) << "an empty stream is done at once";
  auto e = d->create_event();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(d->record_event(*e, *s).ok());
  auto done = d->query_event(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(done.yes());
  ASSERT_TRUE(d->synchronize_event(*e).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - wall, std::chrono::milliseconds(19));
}

}  // namespace
}  // namespace strata::testing
