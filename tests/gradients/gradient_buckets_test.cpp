// Gradient buffers and buckets on 2, 4 and 8 local ranks: reduced gradients
// equal the host's rank-order sum bit for bit (fp32), whatever stream
// produced them and however slowly; the rebuild keeps values and gives every
// rank rank 0's layout; no_sync accumulates; the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "../collectives/rank_set.hpp"
#include "../counter_names.hpp"
#include "strata/gradient_buckets.hpp"

namespace strata {
namespace {

using testing::comm_kind;
using testing::rank_set;

constexpr std::uint32_t seed = 1123;

// Parameters of assorted sizes (elements), some larger than a bucket.
std::vector<gradient_param> model_params() {
  std::vector<gradient_param> p;
  for (const std::size_t n : {300, 5000, 64, 20000, 1000, 7, 40000, 2500, 900, 12000}) {
    p.push_back({n, dtype::f32});
  }
  return p;
}

bucket_options small_buckets(bool view) {
  bucket_options o;
  o.first_bucket_bytes = 8 << 10;
  o.bucket_bytes = 64 << 10;
  o.op = reduce_op::sum;
  o.gradient_as_bucket_view = view;
  return o;
}

struct job {
  rank_set ranks;
  std::vector<stream_handle> comm_streams;
  std::vector<std::unique_ptr<gradient_buckets>> buckets;
  std::vector<gradient_param> params = model_params();

  job(int n, const bucket_options& o, comm_kind kind = comm_kind::local) : ranks(n, kind) {
    for (int r = 0; r < n; ++r) {
      auto s = ranks.dev(r).create_stream();
      EXPECT_TRUE(s.ok());
      comm_streams.push_back(*s);
      auto b = gradient_buckets::create(ranks.comm(r), params, *s, o);
      EXPECT_TRUE(b.ok()) << b.error().to_string();
      buckets.push_back(std::move(*b));
    }
  }
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  job(job&&) = delete;
  job& operator=(job&&) = delete;
  ~job() {
    buckets.clear();
    for (int r = 0; r < ranks.size(); ++r) {
      (void)ranks.dev(r).destroy_stream(comm_streams[static_cast<std::size_t>(r)]);
    }
  }
  gradient_buckets& at(int r) { return *buckets[static_cast<std::size_t>(r)]; }
  float* grad(int r, std::size_t p) { return static_cast<float*>(at(r).grad(p)); }

  // Rank r's gradient p for step s: deterministic values.
  static std::vector<float> values(int r, std::size_t p, int s, std::size_t n) {
    std::mt19937 gen(seed + static_cast<std::uint32_t>(r * 1000 + s * 100) +
                     static_cast<std::uint32_t>(p));
    std::uniform_real_distribution<float> d(-10.0F, 10.0F);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
  }
  // Writes every rank's gradients for step s (host writes: the streams are
  // idle), then marks them ready in `order` on each rank's stream.
  void backward(int s, const std::vector<std::vector<std::size_t>>& orders) {
    ranks.sync_all();
    for (int r = 0; r < ranks.size(); ++r) {
      ASSERT_TRUE(ranks.dev(r).synchronize_stream(comm_streams[static_cast<std::size_t>(r)]).ok());
      for (std::size_t p = 0; p < params.size(); ++p) {
        const auto v = values(r, p, s, params[p].count);
        std::memcpy(grad(r, p), v.data(), v.size() * sizeof(float));
      }
    }
    for (int r = 0; r < ranks.size(); ++r) {
      for (const std::size_t p : orders[static_cast<std::size_t>(r)]) {
        ASSERT_TRUE(at(r).mark_ready(p, ranks.stream(r)).ok());
      }
      ASSERT_TRUE(at(r).finish(ranks.stream(r)).ok());
    }
    ranks.sync_all();
  }
  // Every rank's gradients equal the rank-order sum of step s's values.
  void expect_reduced(int s) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      std::vector<float> want = values(0, p, s, params[p].count);
      for (int r = 1; r < ranks.size(); ++r) {
        const auto v = values(r, p, s, params[p].count);
        for (std::size_t i = 0; i < want.size(); ++i) want[i] += v[i];
      }
      for (int r = 0; r < ranks.size(); ++r) {
        ASSERT_EQ(std::memcmp(grad(r, p), want.data(), want.size() * sizeof(float)), 0)
            << "rank " << r << " parameter " << p << " step " << s << " seed " << seed;
      }
    }
  }
  [[nodiscard]] std::vector<std::vector<std::size_t>> reverse_orders() const {
    std::vector<std::size_t> rev(params.size());
    std::iota(rev.rbegin(), rev.rend(), 0);
    return {static_cast<std::size_t>(ranks.size()), rev};
  }
};

class GradientRanks : public ::testing::TestWithParam<std::tuple<int, bool, comm_kind>> {};

// The nccl cases run under ctest over the stand-in driver and NCCL (their
// names carry "nccl"; ctest's fakenccl.* entries).
INSTANTIATE_TEST_SUITE_P(RanksAndModes, GradientRanks,
                         ::testing::Combine(::testing::Values(2, 4, 8), ::testing::Bool(),
                                            ::testing::Values(comm_kind::local, comm_kind::nccl)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "views_" : "copies_") +
                                  testing::kind_name(std::get<2>(info.param));
                         });

TEST_P(GradientRanks, ReducedGradientsAreTheRankOrderSumAcrossARebuild) {
  const auto [n, view, kind] = GetParam();
  if (kind == comm_kind::nccl && !testing::nccl_expected()) {
    GTEST_SKIP() << "test skipped: the nccl cases run over the stand-in NCCL (ctest fakenccl.*)";
  }
  job j(n, small_buckets(view), kind);
  const std::size_t before = j.at(0).buckets().size();
  EXPECT_GT(before, 3U);
  // Step 0: each rank marks in its own shuffled order; the buckets still
  // go out in index order on every rank.
  std::vector<std::vector<std::size_t>> orders;
  for (int r = 0; r < n; ++r) {
    std::vector<std::size_t> o(j.params.size());
    std::iota(o.begin(), o.end(), 0);
    std::shuffle(o.begin(), o.end(), std::mt19937(seed + static_cast<std::uint32_t>(r)));
    orders.push_back(o);
  }
  j.backward(0, orders);
  j.expect_reduced(0);  // values survive the rebuild that followed
  const auto layout = j.at(0).buffer().order();
  EXPECT_TRUE(std::equal(layout.begin(), layout.end(), orders[0].begin()))
      << "the layout is rank 0's ready order";
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(j.at(r).buckets(), j.at(0).buckets()) << "rank " << r << " disagrees";
  }
  EXPECT_EQ(j.at(0).stats().rebuilds, 1U);
  // Steps after the rebuild, in the reverse order again.
  for (int s = 1; s < 3; ++s) {
    for (int r = 0; r < n; ++r) ASSERT_TRUE(j.at(r).zero(j.ranks.stream(r)).ok());
    j.backward(s, j.reverse_orders());
    j.expect_reduced(s);
  }
  const auto c = j.at(0).stats();
  if (kind == comm_kind::nccl) {
    EXPECT_GE(c.registered_bytes, j.at(0).buffer().bytes()) << "ncclCommRegister of the buffer";
  }
  EXPECT_EQ(c.steps, 3U);
  EXPECT_EQ(c.rebuilds, 1U);
  EXPECT_EQ(c.bytes_copied == 0, view) << "views copy nothing; copy mode packs";
  for (int r = 0; r < n; ++r) EXPECT_TRUE(j.ranks.comm(r).async_error().ok());
}

struct slow_write {
  float* dst;
  std::vector<float> v;
  static void run(void* arg) {
    auto* w = static_cast<slow_write*>(arg);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::memcpy(w->dst, w->v.data(), w->v.size() * sizeof(float));
  }
};

TEST(GradientBuckets, ASlowProducerStreamIsNeverReducedEarly) {
  for (const bool view : {true, false}) {
    job j(2, small_buckets(view));
    auto slow = j.ranks.dev(0).create_stream();
    ASSERT_TRUE(slow.ok());
    // Rank 0 produces parameter 3 on its own stream, 100 ms late.
    slow_write w{j.grad(0, 3), std::vector<float>(j.params[3].count, 5.0F)};
    for (int r = 0; r < 2; ++r) {
      for (std::size_t p = 0; p < j.params.size(); ++p) {
        std::fill_n(j.grad(r, p), j.params[p].count, 1.0F);
      }
    }
    ASSERT_TRUE(j.ranks.dev(0).launch_host_fn(*slow, &slow_write::run, &w).ok());
    for (int r = 0; r < 2; ++r) {
      for (std::size_t p = j.params.size(); p-- > 0;) {
        const stream_handle producer = r == 0 && p == 3 ? *slow : j.ranks.stream(r);
        ASSERT_TRUE(j.at(r).mark_ready(p, producer).ok());
      }
      ASSERT_TRUE(j.at(r).finish(j.ranks.stream(r)).ok());
    }
    j.ranks.sync_all();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(j.grad(r, 3)[0], 6.0F) << "view " << view << " rank " << r;
      EXPECT_EQ(j.grad(r, 3)[j.params[3].count - 1], 6.0F);
      EXPECT_EQ(j.grad(r, 0)[0], 2.0F);
    }
    ASSERT_TRUE(j.ranks.dev(0).synchronize_stream(*slow).ok());
    ASSERT_TRUE(j.ranks.dev(0).destroy_stream(*slow).ok());
  }
}

TEST(GradientBuckets, NoSyncAccumulatesAndTheNextStepReducesTheSum) {
  job j(2, small_buckets(true));
  const std::size_t buckets_before = j.at(0).buckets().size();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(j.at(r).zero(j.ranks.stream(r)).ok());
  j.ranks.sync_all();
  for (int micro = 0; micro < 3; ++micro) {
    const bool last = micro == 2;
    for (int r = 0; r < 2; ++r) {
      j.at(r).no_sync(!last);
      for (std::size_t p = 0; p < j.params.size(); ++p) {
        float* g = j.grad(r, p);
        for (std::size_t i = 0; i < j.params[p].count; ++i) g[i] += static_cast<float>(r + 1);
      }
      for (std::size_t p = j.params.size(); p-- > 0;) {
        ASSERT_TRUE(j.at(r).mark_ready(p, j.ranks.stream(r)).ok());
      }
      ASSERT_TRUE(j.at(r).finish(j.ranks.stream(r)).ok());
    }
    j.ranks.sync_all();
    if (!last) {
      EXPECT_EQ(j.grad(0, 0)[0], static_cast<float>(micro + 1)) << "reduced early";
    }
  }
  // Rank 0 accumulated 3 x 1, rank 1 3 x 2: the reduced sum is 9.
  for (int r = 0; r < 2; ++r) {
    for (std::size_t p = 0; p < j.params.size(); ++p) EXPECT_EQ(j.grad(r, p)[0], 9.0F);
  }
  EXPECT_EQ(j.at(0).stats().reductions, buckets_before) << "only the last micro-step reduces";
  EXPECT_EQ(j.at(0).stats().steps, 3U);
}

// Round to nearest even to bf16 and widen back (finite values only).
float bf16_round(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffU + ((u >> 16) & 1U)) & 0xffff0000U;
  std::memcpy(&x, &u, 4);
  return x;
}

class Bf16Reduction : public ::testing::TestWithParam<std::tuple<int, bool>> {};
INSTANTIATE_TEST_SUITE_P(RanksAndModes, Bf16Reduction,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "views" : "copies");
                         });

// fp32 gradients averaged in bf16: every rank gets, bit for bit, the rule
// bucket_options::reduce_type states (scale by 1/n in fp32, round to bf16,
// sum in fp32 in rank order, round once, widen), and half the fp32 bytes
// cross the wire.
TEST_P(Bf16Reduction, Fp32GradientsAveragedInBf16FollowTheStatedRounding) {
  const auto [n, view] = GetParam();
  bucket_options o = small_buckets(view);
  o.op = reduce_op::avg;
  o.reduce_type = dtype::bf16;
  o.rebuild = false;
  job j(n, o);
  j.backward(0, j.reverse_orders());
  const float share = 1.0F / static_cast<float>(n);
  std::size_t payload = 0;
  for (std::size_t p = 0; p < j.params.size(); ++p) {
    const std::size_t count = j.params[p].count;
    payload += count * sizeof(float);
    std::vector<float> want(count, 0.0F);
    for (int r = 0; r < n; ++r) {
      const auto v = job::values(r, p, 0, count);
      for (std::size_t i = 0; i < count; ++i) {
        const float x = bf16_round(v[i] * share);
        want[i] = r == 0 ? x : want[i] + x;
      }
    }
    for (float& x : want) x = bf16_round(x);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(j.grad(r, p), want.data(), count * sizeof(float)), 0)
          << "rank " << r << " parameter " << p << " seed " << seed;
    }
  }
  const auto c = j.at(0).stats();
  EXPECT_GE(c.bytes_reduced * 2, payload) << "bf16 on the wire: half the fp32 bytes";
  EXPECT_LT(c.bytes_reduced, payload);
  EXPECT_GT(c.bytes_cast, 0U);
  EXPECT_GT(c.staging_bytes, 0U);
}

// On timing-only devices (data=none) a whole step runs, casts and copies
// included, and moves no byte: what `strata plan` needs of the buckets.
TEST(GradientBuckets, AStepRunsOnTimingOnlyDevices) {
  bucket_options o = small_buckets(false);
  o.reduce_type = dtype::bf16;
  o.rebuild = false;  // a rebuild's copies would move nothing either: the views would read 0
  // The devices' memory has no backing (touching it faults): a reduction
  // or a cast that moved a byte would crash the test.
  rank_set ranks(2, {}, "sim:capacity=256MiB,data=none");
  const std::vector<gradient_param> params = model_params();
  std::vector<std::unique_ptr<gradient_buckets>> b;
  for (int r = 0; r < 2; ++r) {
    auto made = gradient_buckets::create(ranks.comm(r), params, ranks.stream(r), o);
    ASSERT_TRUE(made.ok()) << made.error().to_string();
    b.push_back(std::move(*made));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(b[r]->zero(ranks.stream(r)).ok());
    for (std::size_t p = params.size(); p-- > 0;) {
      ASSERT_TRUE(b[r]->mark_ready(p, ranks.stream(r)).ok());
    }
    ASSERT_TRUE(b[r]->finish(ranks.stream(r)).ok());
  }
  ranks.sync_all();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(b[r]->stats().reductions, b[r]->buckets().size());
    EXPECT_TRUE(ranks.comm(r).async_error().ok());
  }
  b.clear();
}

TEST(GradientBuckets, MistakesAreRefusedAndTheStepStaysOpen) {
  job j(2, small_buckets(true));
  auto& b = j.at(0);
  EXPECT_EQ(b.mark_ready(99, j.ranks.stream(0)).code(), errc::invalid_argument);
  ASSERT_TRUE(b.mark_ready(9, j.ranks.stream(0)).ok());
  EXPECT_EQ(b.mark_ready(9, j.ranks.stream(0)).code(), errc::invalid_argument);
  const status early = b.finish(j.ranks.stream(0));
  EXPECT_EQ(early.code(), errc::invalid_argument);
  EXPECT_NE(early.message().find("9 parameter(s) never marked ready this step: 0, 1, 2"),
            std::string::npos)
      << early.message();
  for (std::size_t p = 9; p-- > 0;) ASSERT_TRUE(b.mark_ready(p, j.ranks.stream(0)).ok());
  for (std::size_t p = 10; p-- > 0;) ASSERT_TRUE(j.at(1).mark_ready(p, j.ranks.stream(1)).ok());
  EXPECT_TRUE(b.finish(j.ranks.stream(0)).ok());
  EXPECT_TRUE(j.at(1).finish(j.ranks.stream(1)).ok());
  j.ranks.sync_all();
  bucket_options bad;
  bad.gradient_as_bucket_view = false;
  bad.buckets_inflight = 0;
  EXPECT_EQ(gradient_buckets::create(j.ranks.comm(0), j.params, j.ranks.stream(0), bad).code(),
            errc::invalid_argument);
  bad = {};
  bad.reduce_type = dtype::bf16;  // a cast needs staging
  bad.buckets_inflight = 0;
  EXPECT_EQ(gradient_buckets::create(j.ranks.comm(0), j.params, j.ranks.stream(0), bad).code(),
            errc::invalid_argument);
  // A stream the device never made is refused here, not at the first
  // mark_ready (after which the step could never finish).
  int not_a_stream = 0;
  const auto bogus =
      gradient_buckets::create(j.ranks.comm(0), j.params, stream_handle{&not_a_stream}, {});
  EXPECT_EQ(bogus.code(), errc::invalid_argument);
  if (!bogus.ok()) {
    EXPECT_NE(bogus.error().message().find("comm_stream"), std::string::npos)
        << bogus.error().message();
  }
}

TEST(GradientBuckets, OptionsComeFromStrataConf) {
  auto b = parse_bucket_conf(
      "first_bucket_bytes:2MiB,bucket_bytes:50MiB,buckets_inflight:3,bucket_reduce_dtype:bf16,"
      "gradient_as_bucket_view:false");
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(b->first_bucket_bytes, 2U << 20);
  EXPECT_EQ(b->bucket_bytes, 50U << 20);
  EXPECT_EQ(b->buckets_inflight, 3U);
  EXPECT_EQ(b->reduce_type, dtype::bf16);
  EXPECT_FALSE(b->gradient_as_bucket_view);
  auto d = bucket_options_from(conf_text{});
  ASSERT_TRUE(d.ok());
  const bucket_options defaults;
  EXPECT_EQ(d->first_bucket_bytes, defaults.first_bucket_bytes);
  EXPECT_EQ(d->bucket_bytes, defaults.bucket_bytes);
  EXPECT_EQ(d->buckets_inflight, defaults.buckets_inflight);
  EXPECT_FALSE(d->reduce_type.has_value()) << "`same`: each bucket's own dtype";
  const auto bad = parse_bucket_conf("bucket_reduce_dtype:fp8");
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_NE(bad.error().message().find("bucket_reduce_dtype"), std::string::npos);
  EXPECT_EQ(parse_bucket_conf("buckets_inflight:0").code(), errc::invalid_argument);
  EXPECT_TRUE(parse_bucket_conf("bucket_bytes:0").ok()) << "0: each gradient alone";
}

TEST(GradientBuffer, LayoutViewsAndZeroing) {
  allocator_options ao;
  ao.device = "sim:capacity=64MiB";
  allocator alloc(ao);
  device& dev = alloc.dev();
  const std::vector<gradient_param> params{{10, dtype::f32}, {3, dtype::bf16}, {100, dtype::f16}};
  auto b = gradient_buffer::create(dev, params);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  const gradient_buffer& g = **b;
  // Reverse order by default: parameter 2 first, each at a multiple of 256.
  EXPECT_EQ(g.offset(2), 0U);
  EXPECT_EQ(g.offset(1), 256U);
  EXPECT_EQ(g.offset(0), 512U);
  EXPECT_EQ(g.bytes(), 512U + 40U);
  EXPECT_EQ(g.bytes_of(1), 6U);
  EXPECT_EQ(g.view(3), nullptr);
  EXPECT_EQ(g.reserved_bytes() % dev.granularity(), 0U);
  std::memset(g.data(), 0x5a, g.bytes());
  auto s = dev.create_stream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*b)->zero(*s).ok());
  ASSERT_TRUE(dev.synchronize_stream(*s).ok());
  const auto* bytes = static_cast<const unsigned char*>(g.data());
  EXPECT_TRUE(std::all_of(bytes, bytes + g.bytes(), [](unsigned char c) { return c == 0; }));
  ASSERT_TRUE(dev.destroy_stream(*s).ok());

  const std::size_t order[] = {0, 0, 1};
  EXPECT_EQ(gradient_buffer::create(dev, params, order).code(), errc::invalid_argument);
  EXPECT_EQ(gradient_buffer::create(dev, {}).code(), errc::invalid_argument);
  const gradient_param zero{0, dtype::f32};
  EXPECT_EQ(gradient_buffer::create(dev, {&zero, 1}).code(), errc::invalid_argument);
  EXPECT_EQ(gradient_buffer::create(dev, params, {}, 24).code(), errc::invalid_argument);
  const gradient_param huge{SIZE_MAX / 2, dtype::f32};
  EXPECT_EQ(gradient_buffer::create(dev, {&huge, 1}).code(), errc::invalid_argument);
  const gradient_param big{std::size_t{1} << 30, dtype::f32};  // 4 GiB on a 64 MiB device
  EXPECT_EQ(gradient_buffer::create(dev, {&big, 1}).code(), errc::out_of_memory);
}

TEST(GradientBuckets, BucketsFollowTheLimitsAndSplitByDtype) {
  rank_set ranks(2);
  const std::vector<gradient_param> params{{1024, dtype::f32},
                                           {1024, dtype::f32},
                                           {512, dtype::bf16},
                                           {512, dtype::bf16},
                                           {4096, dtype::f32}};
  bucket_options o;
  o.first_bucket_bytes = 4096;  // one fp32 parameter of 1024
  o.bucket_bytes = 8192;
  auto b = gradient_buckets::create(ranks.comm(0), params, ranks.stream(0), o);
  ASSERT_TRUE(b.ok());
  // Reverse order: 4 (16 KiB, alone), then 3 and 2 (bf16), then 1 and 0.
  const std::vector<std::vector<std::size_t>> want{{4}, {3, 2}, {1, 0}};
  EXPECT_EQ((*b)->buckets(), want);
  // Limits of 0 (as DDP's bucket_cap_mb=0): every gradient is a bucket alone.
  o.first_bucket_bytes = 0;
  o.bucket_bytes = 0;
  auto alone = gradient_buckets::create(ranks.comm(0), params, ranks.stream(0), o);
  ASSERT_TRUE(alone.ok()) << alone.error().to_string();
  const std::vector<std::vector<std::size_t>> each{{4}, {3}, {2}, {1}, {0}};
  EXPECT_EQ((*alone)->buckets(), each);
}

// Counters are named once (strata/counter_list.hpp): the struct holds
// exactly its list's members, and its map has each under the member's name.
TEST(GradientBuckets, CountersMapHasEveryMemberUnderItsName) {
  STRATA_EXPECT_COUNTERS_NAMED_ONCE(gradient_buckets::counters, STRATA_GRADIENT_BUCKET_COUNTERS);
  const stat_map m = gradient_buckets::counters{}.to_map();
  EXPECT_TRUE(m.contains("bytes_reduced") && m.contains("registered_bytes"));
}

}  // namespace
}  // namespace strata
