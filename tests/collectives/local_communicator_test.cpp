// The `local` communicator on 2, 4 and 8 sim devices: every collective's
// bytes against a host reference, the failure paths (disagreeing ranks, a
// rank that fails a call, a rank that never comes), groups, registration.
#include <gtest/gtest.h>

#include <limits>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "rank_set.hpp"

namespace strata {
namespace {

using testing::rank_set;

constexpr std::uint32_t seed = 20261123;

std::vector<float> random_floats(std::size_t n, std::uint32_t s) {
  std::mt19937 gen(s);
  std::uniform_real_distribution<float> dist(-1000.0F, 1000.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::uint32_t bits(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

class LocalRanks : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, LocalRanks, ::testing::Values(2, 4, 8));

TEST_P(LocalRanks, AllReduceSumIsTheRankOrderSumBitForBit) {
  rank_set ranks(GetParam());
  const std::size_t n = 10'000;  // more than one 4096-element chunk
  std::vector<std::vector<float>> inputs;
  std::vector<float*> buf;
  for (int r = 0; r < ranks.size(); ++r) {
    inputs.push_back(random_floats(n, seed + static_cast<std::uint32_t>(r)));
    buf.push_back(ranks.alloc<float>(r, n));
    std::memcpy(buf.back(), inputs.back().data(), n * sizeof(float));
  }
  for (int r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(ranks.comm(r)
                    .all_reduce(buf[r], buf[r], n, dtype::f32, reduce_op::sum, ranks.stream(r))
                    .ok());
  }
  ranks.sync_all();
  for (std::size_t i = 0; i < n; ++i) {
    float want = inputs[0][i];
    for (int r = 1; r < ranks.size(); ++r) want += inputs[static_cast<std::size_t>(r)][i];
    for (int r = 0; r < ranks.size(); ++r) {
      ASSERT_EQ(bits(buf[static_cast<std::size_t>(r)][i]), bits(want))
          << "rank " << r << " element " << i << " seed " << seed;
    }
  }
  for (int r = 0; r < ranks.size(); ++r) EXPECT_TRUE(ranks.comm(r).async_error().ok());
}

TEST_P(LocalRanks, ReduceScatterAndAllGatherRoundTrip) {
  rank_set ranks(GetParam());
  const int k = ranks.size();
  const std::size_t per = 3000;
  const std::size_t full = per * static_cast<std::size_t>(k);
  std::vector<std::vector<float>> inputs;
  std::vector<float*> send;
  std::vector<float*> gathered;
  for (int r = 0; r < k; ++r) {
    inputs.push_back(random_floats(full, seed * 3 + static_cast<std::uint32_t>(r)));
    send.push_back(ranks.alloc<float>(r, full));
    gathered.push_back(ranks.alloc<float>(r, full));
    std::memcpy(send.back(), inputs.back().data(), full * sizeof(float));
  }
  // Reduce-scatter into the rank's own block of `gathered` (its in-place
  // position), then all-gather in place: every rank ends with the full avg.
  for (int r = 0; r < k; ++r) {
    float* own = gathered[static_cast<std::size_t>(r)] + static_cast<std::size_t>(r) * per;
    ASSERT_TRUE(ranks.comm(r)
                    .reduce_scatter(send[static_cast<std::size_t>(r)], own, per, dtype::f32,
                                    reduce_op::avg, ranks.stream(r))
                    .ok());
    ASSERT_TRUE(ranks.comm(r)
                    .all_gather(own, gathered[static_cast<std::size_t>(r)], per, dtype::f32,
                                ranks.stream(r))
                    .ok());
  }
  ranks.sync_all();
  for (std::size_t i = 0; i < full; ++i) {
    float want = inputs[0][i];
    for (int r = 1; r < k; ++r) want += inputs[static_cast<std::size_t>(r)][i];
    want /= static_cast<float>(k);
    for (int r = 0; r < k; ++r) {
      ASSERT_EQ(bits(gathered[static_cast<std::size_t>(r)][i]), bits(want))
          << "rank " << r << " element " << i << " seed " << seed;
    }
  }
}

TEST_P(LocalRanks, BroadcastFromTheLastRank) {
  rank_set ranks(GetParam());
  const int root = ranks.size() - 1;
  const std::size_t n = 5000;
  const auto data = random_floats(n, seed + 7);
  std::vector<float*> buf;
  for (int r = 0; r < ranks.size(); ++r) {
    buf.push_back(ranks.alloc<float>(r, n));
    std::memset(buf.back(), 0, n * sizeof(float));
  }
  std::memcpy(buf[static_cast<std::size_t>(root)], data.data(), n * sizeof(float));
  for (int r = 0; r < ranks.size(); ++r) {
    const void* send = r == root ? buf[static_cast<std::size_t>(r)] : nullptr;
    ASSERT_TRUE(
        ranks.comm(r)
            .broadcast(send, buf[static_cast<std::size_t>(r)], n, dtype::f32, root, ranks.stream(r))
            .ok());
  }
  ranks.sync_all();
  for (int r = 0; r < ranks.size(); ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits(buf[static_cast<std::size_t>(r)][i]), bits(data[i])) << "rank " << r;
    }
  }
}

// bf16 and fp16: the fp32 rank-order sum of the inputs, rounded once.
TEST_P(LocalRanks, HalfPrecisionReducesInFp32AndRoundsOnce) {
  auto pool = kernel_pool::create(1);
  ASSERT_TRUE(pool.ok());
  for (const dtype t : {dtype::bf16, dtype::f16}) {
    rank_set ranks(GetParam());
    const std::size_t n = 6000;
    std::vector<std::vector<std::uint16_t>> inputs;
    std::vector<std::uint16_t*> buf;
    for (int r = 0; r < ranks.size(); ++r) {
      const auto f = random_floats(n, seed + 11 + static_cast<std::uint32_t>(r));
      std::vector<std::uint16_t> h(n);
      ASSERT_TRUE(cast_copy_host(**pool, h.data(), t, f.data(), dtype::f32, n).ok());
      inputs.push_back(h);
      buf.push_back(ranks.alloc<std::uint16_t>(r, n));
      std::memcpy(buf.back(), h.data(), n * 2);
    }
    for (int r = 0; r < ranks.size(); ++r) {
      ASSERT_TRUE(ranks.comm(r)
                      .all_reduce(buf[static_cast<std::size_t>(r)],
                                  buf[static_cast<std::size_t>(r)], n, t, reduce_op::sum,
                                  ranks.stream(r))
                      .ok());
    }
    ranks.sync_all();
    std::vector<float> sum(n);
    std::vector<float> term(n);
    ASSERT_TRUE(cast_copy_host(**pool, sum.data(), dtype::f32, inputs[0].data(), t, n).ok());
    for (int r = 1; r < ranks.size(); ++r) {
      ASSERT_TRUE(cast_copy_host(**pool, term.data(), dtype::f32,
                                 inputs[static_cast<std::size_t>(r)].data(), t, n)
                      .ok());
      for (std::size_t i = 0; i < n; ++i) sum[i] += term[i];
    }
    std::vector<std::uint16_t> want(n);
    ASSERT_TRUE(cast_copy_host(**pool, want.data(), t, sum.data(), dtype::f32, n).ok());
    for (int r = 0; r < ranks.size(); ++r) {
      EXPECT_EQ(std::memcmp(buf[static_cast<std::size_t>(r)], want.data(), n * 2), 0)
          << (t == dtype::bf16 ? "bf16" : "f16") << " rank " << r << " seed " << seed;
    }
  }
}

// Each rank's thread issues its own collectives, as NCCL users do.
TEST_P(LocalRanks, RanksOnTheirOwnThreadsRunManyCollectives) {
  rank_set ranks(GetParam());
  const std::size_t n = 256;
  const int rounds = 40;
  std::vector<float*> buf;
  for (int r = 0; r < ranks.size(); ++r) buf.push_back(ranks.alloc<float>(r, n));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      float* b = buf[static_cast<std::size_t>(r)];
      for (int i = 0; i < rounds; ++i) {
        for (std::size_t j = 0; j < n; ++j) b[j] = static_cast<float>(r + i);
        if (!ranks.comm(r).all_reduce(b, b, n, dtype::f32, reduce_op::sum, ranks.stream(r)).ok()) {
          return;
        }
        (void)ranks.dev(r).synchronize_stream(ranks.stream(r));
        const int k = ranks.size();
        const int total = (k * (k - 1) / 2) + (k * i);  // exact: k (k - 1) is even
        const auto want = static_cast<float>(total);
        for (std::size_t j = 0; j < n; ++j) {
          if (b[j] != want) ADD_FAILURE() << "rank " << r << " round " << i << ": " << b[j];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks.size(); ++r) EXPECT_TRUE(ranks.comm(r).async_error().ok());
}

struct write_later {
  float* dst;
  float value;
  static void run(void* arg) {
    auto* w = static_cast<write_later*>(arg);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    w->dst[0] = w->value;
  }
};

TEST(LocalCommunicator, ACollectiveRunsAfterTheWorkQueuedBeforeIt) {
  rank_set ranks(2);
  auto* a = ranks.alloc<float>(0, 1);
  auto* b = ranks.alloc<float>(1, 1);
  a[0] = 0;
  b[0] = 2;
  write_later slow{a, 40};  // rank 0's producer: slow, on the same stream
  ASSERT_TRUE(ranks.dev(0).launch_host_fn(ranks.stream(0), &write_later::run, &slow).ok());
  ASSERT_TRUE(ranks.comm(0).all_reduce(a, a, 1, dtype::f32, reduce_op::sum, ranks.stream(0)).ok());
  ASSERT_TRUE(ranks.comm(1).all_reduce(b, b, 1, dtype::f32, reduce_op::sum, ranks.stream(1)).ok());
  ranks.sync_all();
  EXPECT_EQ(a[0], 42);
  EXPECT_EQ(b[0], 42);
}

TEST(LocalCommunicator, DisagreeingRanksFailEveryRankAndWriteNothing) {
  rank_set ranks(3);
  std::vector<float*> buf;
  for (int r = 0; r < 3; ++r) {
    buf.push_back(ranks.alloc<float>(r, 8));
    for (int i = 0; i < 8; ++i) buf.back()[i] = 1;
  }
  for (int r = 0; r < 3; ++r) {
    const std::size_t count = r == 2 ? 7 : 8;
    ASSERT_TRUE(ranks.comm(r)
                    .all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)],
                                count, dtype::f32, reduce_op::sum, ranks.stream(r))
                    .ok());
  }
  ranks.sync_all();
  for (int r = 0; r < 3; ++r) {
    const status e = ranks.comm(r).async_error();
    EXPECT_EQ(e.code(), errc::comm_error);
    EXPECT_NE(e.message().find("rank 2 calls all_reduce of 7 f32"), std::string::npos)
        << e.message();
    EXPECT_EQ(buf[static_cast<std::size_t>(r)][0], 1) << "a failed collective wrote rank " << r;
    // Every later call reports the failure.
    EXPECT_EQ(ranks.comm(r)
                  .all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)], 8,
                              dtype::f32, reduce_op::sum, ranks.stream(r))
                  .code(),
              errc::comm_error);
  }
}

TEST(LocalCommunicator, ARankThatNeverComesTimesOutWithItsNumber) {
  local_comm_options o;
  o.timeout = std::chrono::milliseconds(200);
  rank_set ranks(3, o);
  std::vector<float*> buf;
  for (int r = 0; r < 3; ++r) buf.push_back(ranks.alloc<float>(r, 4));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {  // rank 2 never calls
    ASSERT_TRUE(ranks.comm(r)
                    .all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)],
                                4, dtype::f32, reduce_op::sum, ranks.stream(r))
                    .ok());
  }
  ASSERT_TRUE(ranks.dev(0).synchronize_stream(ranks.stream(0)).ok());
  ASSERT_TRUE(ranks.dev(1).synchronize_stream(ranks.stream(1)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  for (int r = 0; r < 3; ++r) {
    const status e = ranks.comm(r).async_error();
    EXPECT_EQ(e.code(), errc::comm_error);
    EXPECT_NE(e.message().find("rank(s) 2 never joined"), std::string::npos) << e.message();
  }
}

TEST(LocalCommunicator, ARankThatFailsACallReleasesTheOthersAtOnce) {
  rank_set ranks(2);  // the default timeout: a minute
  auto* a = ranks.alloc<float>(0, 4);
  ASSERT_TRUE(ranks.comm(0).broadcast(a, a, 4, dtype::f32, 0, ranks.stream(0)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ranks.comm(1).broadcast(nullptr, nullptr, 4, dtype::f32, 0, ranks.stream(1)).code(),
            errc::invalid_argument);
  ASSERT_TRUE(ranks.dev(0).synchronize_stream(ranks.stream(0)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  const status e = ranks.comm(0).async_error();
  EXPECT_EQ(e.code(), errc::comm_error);
  EXPECT_NE(e.message().find("rank 1 failed its broadcast call"), std::string::npos) << e.message();
}

TEST(LocalCommunicator, OneThreadDrivesEveryRankInAGroup) {
  rank_set ranks(4);
  std::vector<float*> buf;
  for (int r = 0; r < 4; ++r) {
    buf.push_back(ranks.alloc<float>(r, 16));
    for (int i = 0; i < 16; ++i) buf.back()[i] = static_cast<float>(r);
  }
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(ranks.comm(r).group_start().ok());
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(ranks.comm(r).group_start().ok());  // nested
    ASSERT_TRUE(ranks.comm(r)
                    .all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)],
                                16, dtype::f32, reduce_op::sum, ranks.stream(r))
                    .ok());
    ASSERT_TRUE(ranks.comm(r).group_end().ok());
  }
  EXPECT_EQ(buf[0][0], 0);  // held until the outermost group_end
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(ranks.comm(r).group_end().ok());
  ranks.sync_all();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(buf[static_cast<std::size_t>(r)][15], 6);
  EXPECT_EQ(ranks.comm(0).group_end().code(), errc::invalid_argument);
}

TEST(LocalCommunicator, BadArgumentsAreRefused) {
  rank_set ranks(2);
  auto* a = ranks.alloc<float>(0, 4);
  auto& c = ranks.comm(0);
  EXPECT_EQ(c.all_reduce(nullptr, a, 4, dtype::f32, reduce_op::sum, ranks.stream(0)).code(),
            errc::invalid_argument);
  rank_set more(2);
  EXPECT_EQ(more.comm(0)
                .all_reduce(a, a, 4, static_cast<dtype>(9), reduce_op::sum, more.stream(0))
                .code(),
            errc::invalid_argument);
  rank_set again(2);
  EXPECT_EQ(again.comm(0).broadcast(a, a, 4, dtype::f32, 2, again.stream(0)).code(),
            errc::invalid_argument);
  rank_set big(2);
  EXPECT_EQ(big.comm(0).all_gather(a, a, SIZE_MAX / 4, dtype::f32, big.stream(0)).code(),
            errc::invalid_argument);
}

TEST(LocalCommunicator, RegistrationIsCheckedAndCounted) {
  rank_set ranks(2);
  auto* a = ranks.alloc<unsigned char>(0, 1 << 20);
  auto& c = ranks.comm(0);
  auto h = c.register_buffer(a, 4096);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(c.registered_bytes(), 4096U);
  EXPECT_EQ(c.register_buffer(a + 100, 10).code(), errc::invalid_argument);  // overlaps
  EXPECT_EQ(c.register_buffer(nullptr, 10).code(), errc::invalid_argument);
  EXPECT_EQ(c.register_buffer(a, 0).code(), errc::invalid_argument);
  auto h2 = c.register_buffer(a + 4096, 4096);
  ASSERT_TRUE(h2.ok());
  EXPECT_TRUE(c.deregister_buffer(*h).ok());
  EXPECT_EQ(c.deregister_buffer(*h).code(), errc::invalid_argument);
  EXPECT_EQ(c.registered_bytes(), 4096U);
}

TEST(LocalCommunicator, CreationErrors) {
  EXPECT_EQ(create_local_communicators({}).code(), errc::invalid_argument);
  allocator_options ao;
  ao.device = "sim:capacity=64MiB";
  allocator alloc(ao);
  device* twice[] = {&alloc.dev(), &alloc.dev()};
  EXPECT_EQ(create_local_communicators(twice).code(), errc::invalid_argument);
  device* one[] = {&alloc.dev()};
  local_comm_options o;
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(create_local_communicators(one, o).code(), errc::invalid_argument);
  EXPECT_TRUE(create_local_communicators(one).ok());
  // Rates and latencies that are not numbers, infinite, negative or absurd
  // would make the first collective's modeled time undefined.
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct bad_value {
    double local_comm_options::*field;
    const char* name;
    double value;
  };
  for (const bad_value& b : {bad_value{&local_comm_options::link_gbps, "link_gbps", nan},
                             bad_value{&local_comm_options::link_gbps, "link_gbps", inf},
                             bad_value{&local_comm_options::link_gbps, "link_gbps", -1.0},
                             bad_value{&local_comm_options::link_gbps, "link_gbps", 1e-9},
                             bad_value{&local_comm_options::link_gbps, "link_gbps", 1e30},
                             bad_value{&local_comm_options::latency_us, "latency_us", nan},
                             bad_value{&local_comm_options::latency_us, "latency_us", inf},
                             bad_value{&local_comm_options::latency_us, "latency_us", -1.0},
                             bad_value{&local_comm_options::latency_us, "latency_us", 1e30}}) {
    local_comm_options bad;
    bad.*b.field = b.value;
    const auto made = create_local_communicators(one, bad);
    EXPECT_EQ(made.code(), errc::invalid_argument) << b.name << " " << b.value;
    if (!made.ok()) {
      EXPECT_NE(made.error().message().find(b.name), std::string::npos) << made.error().message();
    }
  }
  local_comm_options edge;
  edge.link_gbps = min_link_gbps;
  edge.latency_us = max_latency_us;
  EXPECT_TRUE(create_local_communicators(one, edge).ok()) << "the ends of the ranges are allowed";
}

// Timing-only devices (data=none): the collective is matched and takes its
// modeled time on the modeled clock, starting when the later rank reaches
// it, and no byte moves; mixing them with data devices is refused.
TEST(LocalCommunicator, TimingOnlyDevicesMoveNothingAndTakeTheirTime) {
  local_comm_options o;
  o.link_gbps = 1;  // 1 MiB all-reduced on 2 ranks: 1 MiB over the link
  o.latency_us = 10;
  rank_set ranks(2, o, "sim:capacity=256MiB,data=none,driver_costs=none,tflops=1");
  ASSERT_TRUE(ranks.dev(0).timing_only());
  const std::size_t n = 1 << 18;
  float* x[2] = {ranks.alloc<float>(0, n), ranks.alloc<float>(1, n)};
  // A timing-only device's memory has no backing (touching it faults), so
  // a collective that moved a byte would crash the test.
  // Rank 1 computes for 3 ms first: the collective starts when it arrives.
  ASSERT_TRUE(ranks.dev(1).queue_modeled_kernel(ranks.stream(1), 3e9, 0).ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        ranks.comm(r).all_reduce(x[r], x[r], n, dtype::f32, reduce_op::sum, ranks.stream(r)).ok());
  }
  ranks.sync_all();
  const double link = 2.0 * (2 - 1) / 2 * (n * 4.0) / 1e9 + 10e-6;
  for (int r = 0; r < 2; ++r) {
    auto clock = ranks.dev(r).modeled_clock();
    ASSERT_TRUE(clock.ok());
    EXPECT_NEAR(*clock, 3e-3 + link, 1e-12) << "rank " << r;
  }
  // A mismatch is still a mismatch.
  ASSERT_TRUE(
      ranks.comm(0).all_reduce(x[0], x[0], n, dtype::f32, reduce_op::sum, ranks.stream(0)).ok());
  ASSERT_TRUE(ranks.comm(1)
                  .all_reduce(x[1], x[1], n / 2, dtype::f32, reduce_op::sum, ranks.stream(1))
                  .ok());
  ranks.sync_all();
  EXPECT_EQ(ranks.comm(0).async_error().code(), errc::comm_error);

  allocator_options ao;
  ao.device = "sim:capacity=64MiB";
  allocator with_data(ao);
  device* mixed[] = {&ranks.dev(0), &with_data.dev()};
  EXPECT_EQ(create_local_communicators(mixed).code(), errc::invalid_argument);
}

// A timing-only group may stand for more ranks than it has devices
// (modeled_ranks): size() says the modeled count, buffers are sized for it,
// and a collective takes the modeled ring's time, as on a group that has
// every device.
TEST(LocalCommunicator, AFewTimingOnlyRanksStandForMany) {
  const char* spec = "sim:capacity=256MiB,data=none,driver_costs=none,tflops=1";
  local_comm_options o;
  o.link_gbps = 1;
  o.latency_us = 10;
  o.modeled_ranks = 4;
  rank_set few(2, o, spec);
  local_comm_options full = o;
  full.modeled_ranks = 0;
  rank_set every(4, full, spec);
  EXPECT_EQ(few.comm(0).size(), 4);
  EXPECT_EQ(few.comm(1).size(), 4);
  const std::size_t n = 1 << 16;
  const auto time_of = [&](rank_set& ranks, int count) {
    for (int r = 0; r < count; ++r) {
      auto* send = ranks.alloc<float>(r, n);
      auto* gathered = ranks.alloc<float>(r, n * 4);  // a shard from each of 4 ranks
      EXPECT_TRUE(ranks.comm(r)
                      .all_reduce(send, send, n, dtype::f32, reduce_op::sum, ranks.stream(r))
                      .ok());
      EXPECT_TRUE(ranks.comm(r).all_gather(send, gathered, n, dtype::f32, ranks.stream(r)).ok());
    }
    ranks.sync_all();
    auto clock = ranks.dev(0).modeled_clock();
    EXPECT_TRUE(clock.ok());
    return clock.ok() ? *clock : -1.0;
  };
  const double expected = (2.0 * 3 / 4 * n * 4 + 3.0 * n * 4) / 1e9 + 2 * 10e-6;
  EXPECT_NEAR(time_of(few, 2), expected, 1e-12);
  EXPECT_NEAR(time_of(every, 4), expected, 1e-12);
  EXPECT_TRUE(few.comm(0).async_error().ok());

  // Fewer modeled ranks than devices, too many, or devices with data: refused.
  std::vector<device*> devices{&few.dev(0), &few.dev(1)};
  local_comm_options bad = o;
  bad.modeled_ranks = 1;
  EXPECT_EQ(create_local_communicators(devices, bad).code(), errc::invalid_argument);
  bad.modeled_ranks = max_modeled_ranks + 1;
  EXPECT_EQ(create_local_communicators(devices, bad).code(), errc::invalid_argument);
  allocator_options ao;
  ao.device = "sim:capacity=64MiB";
  allocator with_data(ao);
  device* data[] = {&with_data.dev()};
  bad.modeled_ranks = 4;
  auto refused = create_local_communicators(data, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("timing-only"), std::string::npos)
      << refused.error().message();
}

}  // namespace
}  // namespace strata
