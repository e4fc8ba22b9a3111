// The allocator's contract on the sim device: sizes, alignment, bad input,
// out-of-memory reports, cache control, stats and reports.
#include <gtest/gtest.h>

#include <vector>

#include "allocator/allocator_fixture.hpp"
#include "strata/bucket_options.hpp"
#include "strata/tier_options.hpp"

namespace strata::testing {
namespace {

TEST(Allocator, SizesAlignmentAndZero) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  auto zero = a->malloc(0);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, nullptr);
  EXPECT_TRUE(a->free(nullptr).ok());
  std::vector<void*> ptrs;
  for (std::size_t size : {1u, 100u, 512u, 513u, 4097u, 65536u, 300000u, 1u << 20, (1u << 20) + 1,
                           5u << 20, 33u << 20}) {
    auto p = a->malloc(size);
    ASSERT_TRUE(p.ok()) << size << ": " << p.error().to_string();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*p) % 512, 0u) << size;
    fill(*p, size, static_cast<std::uint32_t>(size));
    ptrs.push_back(*p);
  }
  std::size_t i = 0;
  for (std::size_t size : {1u, 100u, 512u, 513u, 4097u, 65536u, 300000u, 1u << 20, (1u << 20) + 1,
                           5u << 20, 33u << 20}) {
    EXPECT_TRUE(holds(ptrs[i], size, static_cast<std::uint32_t>(size))) << size;
    EXPECT_TRUE(a->free(ptrs[i++]).ok());
  }
  EXPECT_EQ(stat_of(*a, "allocation.all.current"), 0);
  EXPECT_EQ(stat_of(*a, "allocated_bytes.all.current"), 0);
}

TEST(Allocator, RoundingFollowsTheDocumentedRule) {
  auto a = make_allocator("sim:capacity=256MiB");
  ASSERT_TRUE(a);
  const auto allocated_after = [&](std::size_t size) {
    auto p = a->malloc_async(size, nullptr);
    EXPECT_TRUE(p.ok());
    const auto bytes = stat_of(*a, "allocated_bytes.all.current");
    EXPECT_TRUE(a->free_async(*p, nullptr).ok());
    return bytes;
  };
  EXPECT_EQ(allocated_after(1), 512);
  EXPECT_EQ(allocated_after(1500), 1536);
  EXPECT_EQ(allocated_after(2049), 2560);
  EXPECT_EQ(allocated_after(100000), 114688);    // class 112 KiB
  EXPECT_EQ(allocated_after(300000), 327680);    // class 320 KiB
  EXPECT_EQ(allocated_after(1 << 20), 1 << 20);  // the largest class
  EXPECT_EQ(allocated_after((1u << 20) + 1), (1 << 20) + 512);
}

TEST(Allocator, ForeignAndDoubleFreesAreErrorsThatChangeNothing) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto small = a->malloc(1000);
  auto large = a->malloc(3 << 20);
  ASSERT_TRUE(small.ok() && large.ok());
  // Every memory stat: the refused calls still count as calls that took
  // the lock (num_locked_calls, locked_call_ns), nothing else.
  const auto memory_stats = [&] {
    auto m = a->stats().to_map();
    m.erase("num_locked_calls");
    m.erase("locked_call_ns");
    return m;
  };
  const auto before = memory_stats();
  const auto calls_before = a->stats().to_map().at("num_locked_calls");
  int local = 0;
  auto foreign = a->free(&local);
  EXPECT_EQ(foreign.code(), errc::invalid_argument);
  EXPECT_NE(foreign.message().find("not a live allocation"), std::string::npos);
  auto inside = a->free(static_cast<char*>(*large) + 512);
  EXPECT_EQ(inside.code(), errc::invalid_argument);
  auto inside_small = a->free(static_cast<char*>(*small) + 8);
  EXPECT_EQ(inside_small.code(), errc::invalid_argument);
  EXPECT_EQ(memory_stats(), before) << "a refused free changed the stats";
  EXPECT_EQ(a->stats().to_map().at("num_locked_calls"), calls_before + 3);
  EXPECT_TRUE(a->free(*small).ok());
  EXPECT_TRUE(a->free_async(*large, nullptr).ok());
  EXPECT_EQ(a->free(*small).code(), errc::invalid_argument) << "double free accepted";
  EXPECT_EQ(a->free_async(*large, nullptr).code(), errc::invalid_argument);
  EXPECT_EQ(a->record_stream(*large, nullptr).code(), errc::invalid_argument);
}

TEST(Allocator, UnknownStreamsAreErrors) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  int not_a_stream = 0;
  auto p = a->malloc_async(4096, &not_a_stream);
  EXPECT_EQ(p.code(), errc::invalid_argument);
  auto q = a->malloc_async(4096, nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(a->free_async(*q, &not_a_stream).code(), errc::invalid_argument);
  EXPECT_EQ(a->record_stream(*q, &not_a_stream).code(), errc::invalid_argument);
  EXPECT_TRUE(a->free_async(*q, nullptr).ok()) << "the refused calls must leave the block live";
}

TEST(Allocator, OutOfMemoryReportsTheNumbersAndKeepsWorking) {
  auto a = make_allocator("sim:capacity=32MiB");
  ASSERT_TRUE(a);
  auto huge = a->malloc(std::size_t{1} << 40);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.code(), errc::out_of_memory);
  const std::string& m = huge.error().message();
  for (const char* part : {"1 TiB", "1099511627776 bytes", "capacity 32 MiB", "allocated",
                           "reserved", "exceeds the allocator's limit", "verdict"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
  }
  auto absurd = a->malloc(static_cast<std::size_t>(-1));
  EXPECT_EQ(absurd.code(), errc::out_of_memory);
  std::vector<void*> held;
  while (true) {
    auto p = a->malloc(4 << 20);
    if (!p) {
      EXPECT_EQ(p.code(), errc::out_of_memory);
      break;
    }
    held.push_back(*p);
  }
  EXPECT_EQ(held.size(), 8u);
  EXPECT_EQ(stat_of(*a, "num_ooms"), 3);
  EXPECT_EQ(stat_of(*a, "num_alloc_retries"), 0) << "growing is not a retry";
  for (void* p : held) EXPECT_TRUE(a->free(p).ok());
  auto again = a->malloc(16 << 20);
  EXPECT_TRUE(again.ok()) << "memory freed device-wide was not reusable: "
                          << again.error().to_string();
  EXPECT_GE(stat_of(*a, "num_alloc_retries"), 1) << "the pending frees had to be reclaimed";
}

TEST(Allocator, MemoryFractionLimitsWhatIsHeld) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->set_memory_fraction(0.0).code(), errc::invalid_argument);
  EXPECT_EQ(a->set_memory_fraction(1.5).code(), errc::invalid_argument);
  ASSERT_TRUE(a->set_memory_fraction(0.25).ok());
  auto fits = a->malloc(16 << 20);
  ASSERT_TRUE(fits.ok());
  auto over = a->malloc(2 << 20);
  EXPECT_EQ(over.code(), errc::out_of_memory);
  EXPECT_NE(over.error().message().find("limit 16 MiB"), std::string::npos)
      << over.error().message();
  ASSERT_TRUE(a->set_memory_fraction(1.0).ok());
  EXPECT_TRUE(a->malloc(2 << 20).ok());
}

TEST(Allocator, EmptyCacheAndTrimReturnIdlePages) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  std::vector<void*> ptrs;
  for (int i = 0; i < 6; ++i) ptrs.push_back(*a->malloc_async(4 << 20, nullptr));
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 24 << 20);
  for (void* p : ptrs) ASSERT_TRUE(a->free_async(p, nullptr).ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 24 << 20) << "pages are cached";
  ASSERT_TRUE(a->trim(8 << 20).ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 8 << 20);
  ASSERT_TRUE(a->empty_cache().ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0);
  auto info = a->dev().get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total);
  EXPECT_EQ(stat_of(*a, "num_device_free"), 12);
}

TEST(Allocator, ReleaseThresholdReturnsPagesAboveIt) {
  allocator_options o;
  o.release_threshold = 4 << 20;
  auto a = make_allocator("sim:capacity=64MiB", o);
  ASSERT_TRUE(a);
  auto p = a->malloc_async(20 << 20, nullptr);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->free_async(*p, nullptr).ok());
  // The stream has no queued work, so its pages become idle as soon as the
  // next release check polls its epoch.
  ASSERT_TRUE(a->dev().synchronize().ok());
  auto q = a->malloc_async(1 << 20 | 1, nullptr);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(a->free_async(*q, nullptr).ok());
  EXPECT_LE(stat_of(*a, "reserved_bytes.all.current"), (4 << 20) + (2 << 20));
}

TEST(Allocator, StatsFollowPytorchNames) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto s = a->malloc(1000);
  auto l = a->malloc(3 << 20);
  ASSERT_TRUE(s.ok() && l.ok());
  auto m = a->stats().to_map();
  EXPECT_EQ(m.at("allocation.small_pool.current"), 1);
  EXPECT_EQ(m.at("allocation.large_pool.current"), 1);
  EXPECT_EQ(m.at("allocated_bytes.small_pool.current"), 1024);
  EXPECT_EQ(m.at("allocated_bytes.large_pool.current"), 3 << 20);
  EXPECT_EQ(m.at("requested_bytes.all.current"), 1000 + (3 << 20));
  EXPECT_EQ(m.at("reserved_bytes.all.current"), 6 << 20);  // one slab page + two large pages
  EXPECT_EQ(m.at("num_device_alloc"), 3);
  for (const char* key :
       {"segment.all.peak", "active.large_pool.allocated", "inactive_split_bytes.all.current",
        "num_alloc_retries", "num_sync_all_streams", "num_device_free"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  ASSERT_TRUE(a->free(*s).ok());
  ASSERT_TRUE(a->free(*l).ok());
  m = a->stats().to_map();
  EXPECT_EQ(m.at("allocated_bytes.all.current"), 0);
  EXPECT_EQ(m.at("allocated_bytes.all.peak"), 1024 + (3 << 20));
  EXPECT_EQ(m.at("active_bytes.all.current"), 1024 + (3 << 20)) << "device-wide frees are pending";
  a->reset_peak_stats();
  EXPECT_EQ(stat_of(*a, "allocated_bytes.all.peak"), 0);
}

TEST(Allocator, SummaryAndSnapshotDescribeTheState) {
  auto a = make_allocator("sim:capacity=64MiB");
  ASSERT_TRUE(a);
  auto p = a->malloc(5 << 20);
  ASSERT_TRUE(p.ok());
  const std::string summary = a->memory_summary();
  for (const char* part : {"Strata memory summary", "Allocated memory", "GPU reserved memory",
                           "from large pool", "5 MiB", "OOMs: 0"}) {
    EXPECT_NE(summary.find(part), std::string::npos) << part << "\n" << summary;
  }
  const std::string snap = a->snapshot_json();
  for (const char* part :
       {R"("arenas":[)", R"("state":"allocated")", R"("size":5242880)", R"("requested":5242880)",
        R"("mapped_pages":[{"first":0,"count":3}])", R"("allocated_bytes.all.current":5242880)"}) {
    EXPECT_NE(snap.find(part), std::string::npos) << part << "\n" << snap;
  }
}

TEST(AllocatorConf, ParsesKeysAndDeviceSpecsWithCommas) {
  auto o = parse_allocator_conf(
      "device:sim:capacity=1GiB,granularity=2MiB,release_threshold:64MiB,small_size:512KiB,"
      "memory_fraction:0.5,wait_before_grow:false,trace_buffer:4096,"
      "report_on_exit:/tmp/strata report.txt");
  ASSERT_TRUE(o.ok()) << o.error().to_string();
  EXPECT_EQ(o->trace_buffer, 4096u);
  EXPECT_EQ(o->device, "sim:capacity=1GiB,granularity=2MiB");
  EXPECT_EQ(o->release_threshold, 64u << 20);
  EXPECT_EQ(o->small_size, 512u << 10);
  EXPECT_DOUBLE_EQ(o->memory_fraction, 0.5);
  EXPECT_FALSE(o->wait_before_grow);
}

TEST(AllocatorConf, BadConfNamesTheKey) {
  struct bad {
    const char* conf;
    const char* says;
  };
  for (const auto& b :
       {bad{"colour:blue", "unknown key 'colour'"}, bad{"memory_fraction:2", "'memory_fraction'"},
        bad{"small_size:lots", "'small_size'"}, bad{"release_threshold:-1", "'release_threshold'"},
        bad{"granularity=2MiB", "key:value"}, bad{"device:sim,device:cuda", "given twice"},
        bad{"wait_before_grow:maybe", "true or false"}, bad{"trace_buffer:lots", "'trace_buffer'"},
        bad{"trace_buffer:1000000000", "67108864"}, bad{"memory_fraction:0.5,,", "empty item"}}) {
    auto o = parse_allocator_conf(b.conf);
    ASSERT_FALSE(o.ok()) << b.conf;
    EXPECT_EQ(o.code(), errc::invalid_argument);
    EXPECT_NE(o.error().message().find(b.says), std::string::npos)
        << b.conf << " -> " << o.error().message();
  }
  auto o = parse_allocator_conf("device:sim:colour=blue");
  ASSERT_TRUE(o.ok());
  auto made = caching_allocator::create(*o);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message().find("'colour'"), std::string::npos);
}

TEST(AllocatorConf, OffloadKeysReachTheTiersSettings) {
  auto o = parse_tier_conf(
      "device:sim,host_capacity:8GiB,host_chunk:4MiB,host_large:1MiB,host_kept:0.1,"
      "nvme_dir:/mnt/nvme/strata,nvme_block_size:512KiB,nvme_queue_depth:64,nvme_capacity:1TiB,"
      "nvme_verify:false");
  ASSERT_TRUE(o.ok()) << o.error().to_string();
  EXPECT_EQ(o->host_capacity, 8ULL << 30);
  EXPECT_EQ(o->host_chunk, 4u << 20);
  EXPECT_EQ(o->host_large, 1u << 20);
  EXPECT_DOUBLE_EQ(o->host_kept, 0.1);
  EXPECT_EQ(o->nvme_dir, "/mnt/nvme/strata");
  EXPECT_EQ(o->nvme_block_size, 512u << 10);
  EXPECT_EQ(o->nvme_queue_depth, 64u);
  EXPECT_EQ(o->nvme_capacity, 1ULL << 40);
  EXPECT_FALSE(o->nvme_verify);
  EXPECT_TRUE(parse_tier_conf("")->nvme_verify) << "spills are verified by default";
  auto none = parse_tier_conf("host_capacity:none,nvme_capacity:none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->host_capacity, 0u);
  EXPECT_EQ(none->nvme_capacity, 0u);
  EXPECT_EQ(parse_tier_conf("")->nvme_dir, "") << "no NVMe tier by default";
  struct bad {
    const char* conf;
    const char* says;
  };
  for (const bad& b :
       {bad{"host_capacity:0", "'host_capacity': expected a byte size of at least 1MiB or 'none'"},
        bad{"host_capacity:4KiB", "at least 1MiB"},
        bad{"host_capacity:1MiB", "less than host_chunk 2MiB"},
        bad{"nvme_capacity:0", "'nvme_capacity': expected a byte size of at least 1MiB or 'none'"},
        bad{"host_chunk:1KiB", "64KiB to 1GiB"}, bad{"host_large:lots", "'host_large'"},
        bad{"host_kept:1.5", "[0, 1]"}, bad{"nvme_queue_depth:0", "1 to 4096"},
        bad{"nvme_queue_depth:5000", "1 to 4096"}, bad{"nvme_block_size:100", "4KiB to 1GiB"},
        bad{"nvme_capacity:-1", "'nvme_capacity'"}, bad{"nvme_verify:maybe", "true or false"},
        bad{"host_capacity:1GiB,host_capacity:2GiB", "twice"}}) {
    // Every layer's key is checked whichever layer's section is asked for.
    auto r = parse_allocator_conf(b.conf);
    ASSERT_FALSE(r.ok()) << b.conf;
    EXPECT_EQ(parse_tier_conf(b.conf).code(), errc::invalid_argument) << b.conf;
    EXPECT_EQ(r.code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(b.says), std::string::npos)
        << b.conf << " -> " << r.error().message();
  }
  // One rule for zero: a byte size may be 0 wherever 0 means "none of it"
  // (keep no idle memory, one gradient per bucket, no prefetch); where a
  // key's `none` is stored as 0, 0 is refused with the key's range.
  auto zeros = parse_allocator_conf(
      "release_threshold:0,bucket_bytes:0,first_bucket_bytes:0,prefetch_bytes:0,"
      "host_lookahead:0,device_lookahead:0,reuse_distance:0");
  ASSERT_TRUE(zeros.ok()) << zeros.error().to_string();
  EXPECT_EQ(zeros->release_threshold, 0u);
  EXPECT_EQ(parse_bucket_conf("bucket_bytes:0")->bucket_bytes, 0u);
}

TEST(Allocator, DeviceFaultsFailCleanlyAndLoseNoPage) {
  auto dev = sim_device::create(*parse_sim_config("capacity=64MiB"));
  ASSERT_TRUE(dev.ok());
  sim_device* sim = dev->get();
  auto made = caching_allocator::create(std::move(*dev), {});
  ASSERT_TRUE(made.ok());
  auto& a = **made;
  sim->arm_fault(sim_fault::map, 1);
  auto p = a.malloc(6 << 20);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), errc::injected_fault);
  EXPECT_EQ(stat_of(a, "num_device_alloc"), 3);
  auto q = a.malloc(10 << 20);
  EXPECT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(stat_of(a, "num_device_alloc"), 5) << "the failed call's pages were not reused";
  EXPECT_EQ(stat_of(a, "reserved_bytes.all.current"), 10 << 20);
  ASSERT_TRUE(a.free(*q).ok());
  ASSERT_TRUE(a.empty_cache().ok());
  auto info = a.dev().get_memory_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total) << "a page was lost";
}

}  // namespace
}  // namespace strata::testing
