// Behaviour only the sim device has: its spec, fault injection, host-visible
// memory, and an 80 GiB card on a small host.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "sim_device.hpp"
#include "strata/device.hpp"

namespace strata::testing {
namespace {

std::unique_ptr<device> open_ok(std::string_view spec) {
  auto d = open_device(spec);
  EXPECT_TRUE(d.ok()) << spec << ": " << d.error().to_string();
  return d.ok() ? std::move(*d) : nullptr;
}

TEST(SimSpec, DefaultsAndNames) {
  auto d = open_ok("sim");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->granularity(), 2u << 20);
  auto info = d->get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->total, 80ull << 30);
  EXPECT_EQ(info->free, 80ull << 30);
  EXPECT_EQ(d->name(), "sim (capacity 80 GiB, granularity 2 MiB)");
}

TEST(SimSpec, BadSpecsNameTheProblem) {
  auto unknown = open_device("sim:capacity=1GiB,colour=blue");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.code(), errc::invalid_argument);
  EXPECT_NE(unknown.error().message().find("'colour'"), std::string::npos);
  EXPECT_NE(unknown.error().message().find("capacity, granularity"), std::string::npos);

  auto bad_size = open_device("sim:capacity=lots");
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.error().message().find("'capacity'"), std::string::npos);

  auto odd_granularity = open_device("sim:granularity=3000");
  ASSERT_FALSE(odd_granularity.ok());
  EXPECT_NE(odd_granularity.error().message().find("power of two"), std::string::npos);

  auto uneven = open_device("sim:capacity=3MiB,granularity=2MiB");
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.error().message().find("multiple of the granularity"), std::string::npos);

  auto no_value = open_device("sim:capacity");
  ASSERT_FALSE(no_value.ok());
  EXPECT_NE(no_value.error().message().find("key=value"), std::string::npos);

  auto twice = open_device("sim:capacity=1GiB,capacity=2GiB");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message().find("twice"), std::string::npos);

  // Absurd values are refused when the spec is read, not later as a
  // failure of their arithmetic.
  for (const auto& [spec, says] :
       {std::pair{"sim:capacity=9223372036854775808", "'capacity': expected 4KiB to 16TiB"},
        std::pair{"sim:capacity=17TiB", "expected 4KiB to 16TiB"},
        std::pair{"sim:granularity=2GiB,capacity=4GiB", "expected 4KiB to 1GiB, a power of two"},
        std::pair{"sim:op_delay_us=18446744073709551615", "expected microseconds from 0 to"},
        std::pair{"sim:copy_latency_us=10000001", "expected microseconds from 0 to"}}) {
    auto d = open_device(spec);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_NE(d.error().message().find(says), std::string::npos) << d.error().message();
  }
  EXPECT_TRUE(open_device("sim:capacity=16TiB").ok()) << "the limit itself opens";

  auto kind = open_device("tpu:0");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.error().message().find("'sim[:key=value,...]'"), std::string::npos);
}

TEST(SimFaults, EachInjectedFaultSurfacesOnceAsItsError) {
  auto d = open_ok(
      "sim:capacity=64MiB,fail_create_page_after=1,fail_map_after=1,fail_copy_after=1,"
      "fail_host_alloc_after=1");
  ASSERT_TRUE(d);
  const auto g = d->granularity();

  auto r1 = d->create_pages(g);
  ASSERT_TRUE(r1.ok());
  auto info = d->get_memory_info();
  ASSERT_TRUE(info.ok());
  auto r2 = d->create_pages(g);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.code(), errc::injected_fault);
  EXPECT_NE(r2.error().message().find("fail_create_page_after"), std::string::npos);
  auto info2 = d->get_memory_info();
  ASSERT_TRUE(info2.ok());
  EXPECT_EQ(info2->free, info->free) << "a failed create consumed memory";
  auto r3 = d->create_pages(g);
  ASSERT_TRUE(r3.ok()) << "the fault should fire once";

  auto base = d->reserve(4 * g);
  ASSERT_TRUE(base.ok());
  ASSERT_TRUE(d->map(*base, g, *r1).ok());
  auto m2 = d->map(*base + g, g, *r3);
  EXPECT_EQ(m2.code(), errc::injected_fault);
  EXPECT_NE(m2.message().find("fail_map_after"), std::string::npos);
  EXPECT_FALSE(d->unmap(*base + g, g).ok()) << "a failed map left a mapping behind";
  ASSERT_TRUE(d->map(*base + g, g, *r3).ok());
  ASSERT_TRUE(d->set_access(*base, 2 * g).ok());

  std::vector<unsigned char> buf(64, 1);
  auto* dst = reinterpret_cast<void*>(*base);
  ASSERT_TRUE(d->copy_async(dst, buf.data(), buf.size(), copy_direction::host_to_device, {}).ok());
  auto c2 = d->copy_async(dst, buf.data(), buf.size(), copy_direction::host_to_device, {});
  EXPECT_EQ(c2.code(), errc::injected_fault);
  EXPECT_NE(c2.message().find("fail_copy_after"), std::string::npos);
  EXPECT_TRUE(d->copy_async(dst, buf.data(), buf.size(), copy_direction::host_to_device, {}).ok());

  auto h1 = d->host_alloc(4096);
  ASSERT_TRUE(h1.ok());
  auto h2 = d->host_alloc(4096);
  EXPECT_EQ(h2.code(), errc::injected_fault);
  EXPECT_NE(h2.error().message().find("fail_host_alloc_after"), std::string::npos);
  EXPECT_TRUE(d->host_free(*h1).ok());

  ASSERT_TRUE(d->synchronize().ok());
  EXPECT_TRUE(d->unmap(*base, 2 * g).ok());
  EXPECT_TRUE(d->release_pages(*r1).ok());
  EXPECT_TRUE(d->release_pages(*r3).ok());
  EXPECT_TRUE(d->free_reservation(*base, 4 * g).ok());
}

TEST(SimFaults, ArmFaultFailsALaterCall) {
  auto made = sim_device::create(sim_config{});
  ASSERT_TRUE(made.ok());
  auto& d = **made;
  d.arm_fault(sim_fault::create_pages, 2);
  EXPECT_TRUE(d.create_pages(d.granularity()).ok());
  EXPECT_TRUE(d.create_pages(d.granularity()).ok());
  EXPECT_EQ(d.create_pages(d.granularity()).code(), errc::injected_fault);
  EXPECT_TRUE(d.create_pages(d.granularity()).ok());
}

TEST(SimMemory, HostSeesMappedBytesAndAliases) {
  auto d = open_ok("sim:capacity=16MiB");
  ASSERT_TRUE(d);
  const auto g = d->granularity();
  auto base = d->reserve(2 * g);
  auto run = d->create_pages(g);
  ASSERT_TRUE(base.ok() && run.ok());
  ASSERT_TRUE(d->map(*base, g, *run).ok());
  ASSERT_TRUE(d->map(*base + g, g, *run).ok());
  ASSERT_TRUE(d->set_access(*base, 2 * g).ok());
  auto* a = reinterpret_cast<unsigned char*>(*base);
  auto* b = a + g;
  for (std::size_t i = 0; i < g; i += 4096) a[i] = static_cast<unsigned char>(i >> 12);
  for (std::size_t i = 0; i < g; i += 4096) ASSERT_EQ(b[i], static_cast<unsigned char>(i >> 12));
  EXPECT_TRUE(d->unmap(*base, 2 * g).ok()) << "two adjacent whole mappings unmap in one call";
  EXPECT_TRUE(d->release_pages(*run).ok());
  EXPECT_TRUE(d->free_reservation(*base, 2 * g).ok());
}

// data=none (timing only): capacity is accounted as ever, a copy moves no
// byte, and a device far larger than this machine's memory is usable.
TEST(SimMemory, TimingOnlyDataMovesNoBytes) {
  auto d = open_ok("sim:capacity=128GiB,data=none");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->memory_is_host());
  EXPECT_NE(d->name().find("timing only"), std::string::npos) << d->name();
  // 64 GiB, more than this machine has, never touched (no more: TSan leaves
  // a program less address space).
  const std::size_t big = std::size_t{64} << 30;
  auto base = d->reserve(big);
  auto run = d->create_pages(big);
  ASSERT_TRUE(base.ok() && run.ok());
  ASSERT_TRUE(d->map(*base, big, *run).ok());
  ASSERT_TRUE(d->set_access(*base, big).ok());
  EXPECT_EQ(d->get_memory_info()->free, std::size_t{64} << 30) << "capacity is accounted";
  EXPECT_EQ(d->create_pages(std::size_t{128} << 30).code(), errc::out_of_memory);
  // The memory has no backing: touching it faults, so a copy or memset
  // that moved a byte would crash the test.
  std::vector<unsigned char> src(1 << 20, 0xab);
  auto* dst = reinterpret_cast<unsigned char*>(*base);
  ASSERT_TRUE(d->copy_async(dst, src.data(), src.size(), copy_direction::host_to_device, {}).ok());
  ASSERT_TRUE(d->memset_async(dst + (1 << 20), 0xcd, 1 << 20, {}).ok());
  ASSERT_TRUE(d->synchronize().ok());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(static_cast<void>(*static_cast<volatile unsigned char*>(dst)), "");
  EXPECT_TRUE(d->unmap(*base, big).ok());
  EXPECT_TRUE(d->release_pages(*run).ok());
  EXPECT_TRUE(d->free_reservation(*base, big).ok());
  EXPECT_EQ(open_device("sim:data=maybe").code(), errc::invalid_argument);
}

TEST(SimMemory, MappedMemoryIsInaccessibleUntilSetAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto d = open_ok("sim:capacity=16MiB");
  ASSERT_TRUE(d);
  const auto g = d->granularity();
  auto base = d->reserve(g);
  auto run = d->create_pages(g);
  ASSERT_TRUE(base.ok() && run.ok());
  ASSERT_TRUE(d->map(*base, g, *run).ok());
  auto* p = reinterpret_cast<volatile unsigned char*>(*base);
  EXPECT_DEATH(p[0] = 1, "");
  std::vector<unsigned char> buf(16);
  auto refused = d->copy_async(reinterpret_cast<void*>(*base), buf.data(), 16,
                               copy_direction::host_to_device, {});
  EXPECT_EQ(refused.code(), errc::invalid_argument);
  EXPECT_NE(refused.message().find("not mapped and accessible"), std::string::npos);
  ASSERT_TRUE(d->set_access(*base, g).ok());
  p[0] = 1;
  EXPECT_EQ(p[0], 1);
  EXPECT_TRUE(d->unmap(*base, g).ok());
  EXPECT_TRUE(d->release_pages(*run).ok());
  EXPECT_TRUE(d->free_reservation(*base, g).ok());
}

TEST(SimMemory, CopiesToUnmappedDeviceMemoryAndUnknownHandlesAreRefused) {
  auto d = open_ok("sim:capacity=16MiB");
  ASSERT_TRUE(d);
  std::vector<unsigned char> host(64);
  std::vector<unsigned char> other(64);
  auto bogus = d->copy_async(host.data(), other.data(), 64, copy_direction::device_to_host, {});
  EXPECT_EQ(bogus.code(), errc::invalid_argument);
  int not_a_stream = 0;
  EXPECT_EQ(d->wrap_stream(&not_a_stream).code(), errc::invalid_argument);
  EXPECT_EQ(d->synchronize_stream(stream_handle{&not_a_stream}).code(), errc::invalid_argument);
  EXPECT_EQ(d->destroy_stream(stream_handle{&not_a_stream}).code(), errc::invalid_argument);
  EXPECT_EQ(d->record_event(event_handle{&not_a_stream}, {}).code(), errc::invalid_argument);
  EXPECT_EQ(d->host_free(host.data()).code(), errc::invalid_argument);
  EXPECT_EQ(d->release_pages(page_run{12345, d->granularity()}).code(), errc::invalid_argument);
  EXPECT_EQ(d->free_reservation(0x1000000, d->granularity()).code(), errc::invalid_argument);
  auto s = d->create_stream();
  ASSERT_TRUE(s.ok());
  auto wrapped = d->wrap_stream(s->native);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(*wrapped, *s);
  EXPECT_TRUE(d->destroy_stream(*s).ok());
  EXPECT_EQ(d->destroy_stream(*s).code(), errc::invalid_argument) << "double destroy accepted";
}

TEST(SimMemory, AdoptedStreamsRunInOrderWhenAsked) {
  int foreign_handle = 0;
  const stream_handle foreign{&foreign_handle};
  auto strict = open_ok("sim:capacity=16MiB");
  ASSERT_TRUE(strict);
  EXPECT_EQ(strict->wrap_stream(foreign.native).code(), errc::invalid_argument);
  auto d = open_ok("sim:capacity=16MiB,adopt_streams=true");
  ASSERT_TRUE(d);
  auto adopted = d->wrap_stream(foreign.native);
  ASSERT_TRUE(adopted.ok()) << adopted.error().to_string();
  EXPECT_EQ(*adopted, foreign);
  std::vector<int> order;
  const auto push = [](void* arg) { static_cast<std::vector<int>*>(arg)->push_back(1); };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d->launch_host_fn(foreign, push, &order).ok());
  ASSERT_TRUE(d->synchronize_stream(foreign).ok());
  EXPECT_EQ(order.size(), 3u) << "the adopted stream did not run its work";
  EXPECT_FALSE(open_device("sim:adopt_streams=maybe").ok());
}

TEST(SimMemory, EightyGiBDeviceOnASmallHost) {
  auto d = open_ok("sim:capacity=80GiB");
  ASSERT_TRUE(d);
  const std::size_t bytes = 80ull << 30;
  auto base = d->reserve(bytes);
  ASSERT_TRUE(base.ok()) << base.error().to_string();
  auto run = d->create_pages(bytes);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  ASSERT_TRUE(d->map(*base, bytes, *run).ok());
  ASSERT_TRUE(d->set_access(*base, bytes).ok());
  auto info = d->get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, 0u);
  auto* p = reinterpret_cast<unsigned char*>(*base);
  for (std::size_t off = 0; off < bytes; off += 1ull << 30)
    p[off] = static_cast<unsigned char>(off >> 30);
  for (std::size_t off = 0; off < bytes; off += 1ull << 30) {
    ASSERT_EQ(p[off], static_cast<unsigned char>(off >> 30));
  }
  EXPECT_EQ(d->create_pages(d->granularity()).code(), errc::out_of_memory);
  EXPECT_TRUE(d->unmap(*base, bytes).ok());
  EXPECT_TRUE(d->release_pages(*run).ok());
  EXPECT_TRUE(d->free_reservation(*base, bytes).ok());
  info = d->get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, bytes);
}

TEST(SimMemory, FreedSlicesAreReused) {
  auto d = open_ok("sim:capacity=8MiB");
  ASSERT_TRUE(d);
  const auto g = d->granularity();
  for (int round = 0; round < 50; ++round) {
    auto a = d->create_pages(2 * g);
    auto b = d->create_pages(g);
    ASSERT_TRUE(a.ok() && b.ok()) << "round " << round;
    ASSERT_TRUE(d->release_pages(*a).ok());
    auto c = d->create_pages(3 * g);
    ASSERT_TRUE(c.ok()) << "round " << round << ": " << c.error().to_string();
    ASSERT_TRUE(d->release_pages(*b).ok());
    ASSERT_TRUE(d->release_pages(*c).ok());
  }
}

}  // namespace
}  // namespace strata::testing
