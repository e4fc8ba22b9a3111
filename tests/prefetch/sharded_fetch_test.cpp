// Sharded parameters on 2, 4 and 8 `local` ranks (sim devices, one thread
// per rank): every acquire returns the whole parameter, equal to its
// values after the last update, while each rank's shards are updated and
// pushed to the host between steps and fetched back; from the second step the gathers go out ahead
// of the acquires; a full buffer the order needs again within reuse_distance is kept, the others
// are resharded; and the mistakes are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "collectives/rank_set.hpp"
#include "strata/c_extension.hpp"
#include "strata/prefetch.h"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"

namespace strata::testing {
namespace {

constexpr std::uint32_t seed = 20261125;
constexpr std::size_t params = 6;
constexpr std::size_t full_floats = 64 << 10;  // 256 KiB a parameter

// Byte equality of two buffers (a gathered parameter is its shards' bits).
bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

std::vector<float> original(std::size_t p) {
  std::mt19937 gen(seed + static_cast<std::uint32_t>(p));
  std::uniform_real_distribution<float> d(-1.0F, 1.0F);
  std::vector<float> v(full_floats);
  for (float& x : v) x = d(gen);
  return v;
}

tier_options tiers() {
  tier_options o;
  o.host_chunk = 2 << 20;
  return o;
}

prefetch_options prefetch(std::uint64_t reuse_distance) {
  prefetch_options o;
  o.prefetch_bytes = 2 * full_floats * sizeof(float);  // two full parameters ahead
  o.device_lookahead = 4 * full_floats * sizeof(float);
  o.reuse_distance = reuse_distance;
  return o;
}

// One rank: its residency manager, prefetcher, communication stream and
// shard handles (shard r of every parameter written from the originals).
struct rank_state {
  std::unique_ptr<residency_manager> manager;
  std::unique_ptr<prefetcher> fetch;
  stream_handle comm_stream{};
  std::vector<std::uint64_t> shards;
};

struct sharded_job {
  rank_set ranks;
  std::vector<rank_state> at;
  std::vector<std::vector<float>> originals;

  sharded_job(int n, std::uint64_t reuse_distance, comm_kind kind = comm_kind::local)
      : ranks(n, kind) {
    for (std::size_t p = 0; p < params; ++p) originals.push_back(original(p));
    const std::size_t per = full_floats / static_cast<std::size_t>(n);
    for (int r = 0; r < n; ++r) {
      rank_state st;
      auto m = residency_manager::create(*ranks.allocs[static_cast<std::size_t>(r)], tiers());
      EXPECT_TRUE(m.ok()) << m.error().to_string();
      if (!m) return;
      st.manager = std::move(*m);
      auto f = prefetcher::create(*st.manager, prefetch(reuse_distance));
      EXPECT_TRUE(f.ok());
      st.fetch = std::move(*f);
      st.comm_stream = *ranks.dev(r).create_stream();
      for (std::size_t p = 0; p < params; ++p) {
        auto h = st.manager->register_buffer(per * sizeof(float), buffer_kind::parameter,
                                             residency_policy::evictable);
        EXPECT_TRUE(h.ok());
        auto d = st.manager->acquire(*h, ranks.stream(r).native);
        EXPECT_TRUE(d.ok());
        std::memcpy(*d, originals[p].data() + static_cast<std::size_t>(r) * per,
                    per * sizeof(float));
        EXPECT_TRUE(st.manager->release(*h, ranks.stream(r).native).ok());
        EXPECT_TRUE(st.fetch->add_sharded(*h, ranks.comm(r), st.comm_stream, dtype::f32).ok());
        st.shards.push_back(*h);
      }
      at.push_back(std::move(st));
    }
  }
  sharded_job(const sharded_job&) = delete;
  sharded_job& operator=(const sharded_job&) = delete;
  sharded_job(sharded_job&&) = delete;
  sharded_job& operator=(sharded_job&&) = delete;
  ~sharded_job() {
    for (std::size_t r = 0; r < at.size(); ++r) {
      at[r].fetch.reset();
      for (const std::uint64_t h : at[r].shards) (void)at[r].manager->unregister(h);
      at[r].manager.reset();
      (void)ranks.dev(static_cast<int>(r)).destroy_stream(at[r].comm_stream);
    }
  }

  // Parameter p's values in step s: the original plus s (every step's
  // optimizer update adds 1).
  [[nodiscard]] std::vector<float> expected(std::size_t p, int s) const {
    std::vector<float> v = originals[p];
    for (float& x : v) x += static_cast<float>(s);
    return v;
  }

  // Rank r's step: forward 0..P-1, backward P-1..0, every parameter checked
  // against its values; then the update (each shard written through the
  // residency manager on the compute stream, as an optimizer step would),
  // and every released shard is pushed off the device, so the next step
  // fetches them all back.
  void step(int r, int s) {
    rank_state& st = at[static_cast<std::size_t>(r)];
    const stream_handle compute = ranks.stream(r);
    ASSERT_TRUE(st.fetch->begin_step().ok());
    for (std::size_t i = 0; i < 2 * params; ++i) {
      const std::size_t p = i < params ? i : 2 * params - 1 - i;
      auto full = st.fetch->acquire(st.shards[p], compute.native, access_mode::read_only);
      ASSERT_TRUE(full.ok()) << full.error().to_string();
      ASSERT_TRUE(ranks.dev(r).synchronize_stream(compute).ok());
      ASSERT_TRUE(same_bytes(*full, expected(p, s).data(), full_floats * sizeof(float)))
          << "rank " << r << " step " << s << " parameter " << p << " (seed " << seed << ")";
      ASSERT_TRUE(st.fetch->release(st.shards[p], compute.native).ok());
    }
    ASSERT_TRUE(st.fetch->end_step().ok());
    const std::size_t per = full_floats / static_cast<std::size_t>(ranks.size());
    for (std::size_t p = 0; p < params; ++p) {
      const std::vector<float> next = expected(p, s + 1);
      auto d = st.manager->acquire(st.shards[p], compute.native);
      ASSERT_TRUE(d.ok()) << d.error().to_string();
      ASSERT_TRUE(ranks.dev(r)
                      .copy_async(*d, next.data() + static_cast<std::size_t>(r) * per,
                                  per * sizeof(float), copy_direction::host_to_device, compute)
                      .ok());
      ASSERT_TRUE(st.manager->release(st.shards[p], compute.native).ok());
      ASSERT_TRUE(ranks.dev(r).synchronize_stream(compute).ok());  // `next` goes out of scope
    }
    ASSERT_TRUE(ranks.dev(r).synchronize_stream(st.comm_stream).ok());
    st.manager->spill(SIZE_MAX);
  }

  void run_steps(int steps) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([this, r, steps] {
        for (int s = 0; s < steps; ++s) step(r, s);
      });
    }
    for (auto& t : threads) t.join();
  }
};

class ShardedFetch : public ::testing::TestWithParam<std::tuple<int, comm_kind>> {};
// The nccl cases run under ctest over the stand-in driver and NCCL (their
// names carry "nccl"; ctest's fakenccl.* entries).
INSTANTIATE_TEST_SUITE_P(Ranks, ShardedFetch,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values(comm_kind::local, comm_kind::nccl)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  kind_name(std::get<1>(info.param));
                         });

TEST_P(ShardedFetch, GatheredAheadOfUseTheParametersEqualTheirUpdatedValues) {
  const auto [n, kind] = GetParam();
  if (kind == comm_kind::nccl && !nccl_expected()) {
    GTEST_SKIP() << "test skipped: the nccl cases run over the stand-in NCCL (ctest fakenccl.*)";
  }
  sharded_job job(n, 0, kind);
  ASSERT_EQ(job.at.size(), static_cast<std::size_t>(n));
  job.run_steps(4);
  for (int r = 0; r < n; ++r) {
    const prefetcher::counters c = job.at[static_cast<std::size_t>(r)].fetch->stats();
    const auto moved = job.at[static_cast<std::size_t>(r)].manager->stats();
    EXPECT_GT(moved.fills_from_host, 0U) << "the shards came back from the host";
    EXPECT_GT(c.gathers_ahead, 0U) << "rank " << r << ": no gather was queued ahead";
    // Once the order is known (steps 2 to 4), a parameter needed again at
    // once (next use 0 <= reuse_distance 0) is kept within the step, not
    // gathered again: the last forward one at the turn, 3 times. Parameter
    // 0, the last backward one, opens the next step, but end_step frees it
    // (the update would make it stale), and nothing is held at the end.
    EXPECT_EQ(c.gathers_reused, 3U);
    EXPECT_EQ(c.gathers + c.gathers_reused, params * 8) << "one gather per other use";
    EXPECT_EQ(c.reshards, c.gathers) << "every full buffer was freed again";
    EXPECT_EQ(c.gathered_bytes, 0U);
    EXPECT_EQ(c.gather_failures, 0U);
    EXPECT_TRUE(job.ranks.comm(r).async_error().ok());
  }
}

TEST(ShardedFetch, FullBuffersNeededWithinTheReuseDistanceAreKept) {
  const std::uint64_t full = full_floats * sizeof(float);
  sharded_job job(2, 3 * full);  // the backward use of the last three forward ones
  job.run_steps(3);
  const prefetcher::counters c = job.at[0].fetch->stats();
  // Steps 2 and 3 follow the order. Released in forward, parameters 4 and
  // 5 are needed again within 3 full parameters (2 and 0 away; 3 is 4
  // away), and are kept. Released in backward, 1 and 0 would be too (2 and
  // 0 away, at the next step's start), but end_step frees them: the update
  // between steps would make them stale. Step 1 has no order: nothing is
  // kept.
  EXPECT_EQ(c.gathers_reused, 2U + 2U);
  EXPECT_EQ(c.gathers + c.gathers_reused, params * 6);
  EXPECT_EQ(c.gathered_bytes, 0U);
  EXPECT_TRUE(job.ranks.comm(1).async_error().ok());
}

TEST(ShardedFetch, MistakesAreRefused) {
  sharded_job job(2, 0);
  rank_state& st = job.at[0];
  const std::uint64_t h = st.shards[0];
  auto rw = st.fetch->acquire(h, job.ranks.stream(0).native, access_mode::read_write);
  EXPECT_EQ(rw.code(), errc::invalid_argument);
  EXPECT_NE(rw.error().message().find("read_only"), std::string::npos);
  EXPECT_EQ(st.fetch->add_sharded(h, job.ranks.comm(0), st.comm_stream, dtype::f32).code(),
            errc::invalid_argument)
      << "already sharded";
  EXPECT_EQ(st.fetch->add_sharded(999, job.ranks.comm(0), st.comm_stream, dtype::f32).code(),
            errc::invalid_argument)
      << "unknown handle";
  auto odd = st.manager->register_buffer(6, buffer_kind::parameter, residency_policy::evictable);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(st.fetch->add_sharded(*odd, job.ranks.comm(0), st.comm_stream, dtype::f32).code(),
            errc::invalid_argument)
      << "6 bytes are not whole fp32 elements";
  EXPECT_EQ(st.fetch->add_sharded(*odd, job.ranks.comm(1), st.comm_stream, dtype::f16).code(),
            errc::invalid_argument)
      << "rank 1's communicator is on another device";
  int not_a_stream = 0;
  const status bogus =
      st.fetch->add_sharded(*odd, job.ranks.comm(0), stream_handle{&not_a_stream}, dtype::f16);
  EXPECT_EQ(bogus.code(), errc::invalid_argument) << "a stream the device never made";
  EXPECT_NE(bogus.message().find("comm_stream"), std::string::npos) << bogus.message();
  EXPECT_TRUE(st.manager->unregister(*odd).ok());
  EXPECT_EQ(st.fetch->release(h, job.ranks.stream(0).native).code(), errc::invalid_argument)
      << "released without an acquire";
}

// The same through the C API (strata/prefetch.h, strata/collectives.h),
// one step on two ranks driven by one thread: the gathers only queue, so
// the ranks' acquires may alternate.
TEST(ShardedFetch, TheCApiGathersAndKeepsItsCommunicator) {
  strata_allocator* alloc[2] = {nullptr, nullptr};
  strata_comm* comm[2] = {nullptr, nullptr};
  strata_residency* res[2] = {nullptr, nullptr};
  strata_prefetcher* fetch[2] = {nullptr, nullptr};
  std::uint64_t shard[2] = {0, 0};
  const std::size_t per = full_floats / 2;
  const std::vector<float> want = original(0);
  for (strata_allocator*& a : alloc) {
    ASSERT_EQ(strata_allocator_create("device:sim:capacity=64MiB", &a), STRATA_OK);
  }
  ASSERT_EQ(strata_comm_create_local(alloc, 2, nullptr, comm), STRATA_OK);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(strata_residency_create(alloc[r], "host_chunk:2MiB", &res[r]), STRATA_OK)
        << strata_last_error_message();
    ASSERT_EQ(strata_prefetcher_create(res[r], "", &fetch[r]), STRATA_OK);
    ASSERT_EQ(strata_residency_register(res[r], per * sizeof(float), STRATA_BUFFER_PARAMETER,
                                        STRATA_EVICTABLE, &shard[r]),
              STRATA_OK);
    void* d = nullptr;
    ASSERT_EQ(strata_residency_acquire(res[r], shard[r], nullptr, &d), STRATA_OK);
    std::memcpy(d, want.data() + static_cast<std::size_t>(r) * per, per * sizeof(float));
    ASSERT_EQ(strata_residency_release(res[r], shard[r], nullptr), STRATA_OK);
    ASSERT_EQ(strata_prefetcher_add_sharded(fetch[r], shard[r], comm[r], nullptr, STRATA_F32),
              STRATA_OK)
        << strata_last_error_message();
  }
  EXPECT_EQ(strata_prefetcher_add_sharded(fetch[0], shard[0], comm[0], nullptr,
                                          static_cast<strata_dtype>(5)),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_comm_destroy(comm[0]), STRATA_ERROR_INVALID_ARGUMENT)
      << "the prefetcher still uses it";
  void* full[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(
        strata_prefetcher_acquire_mode(fetch[r], shard[r], nullptr, STRATA_READ_ONLY, &full[r]),
        STRATA_OK)
        << strata_last_error_message();
  }
  for (int r = 0; r < 2; ++r) {
    strata::allocator* a = strata::c_api::borrow(alloc[r]);
    ASSERT_TRUE(a->dev().synchronize_stream({}).ok());
    strata::c_api::give_back(alloc[r]);
    EXPECT_TRUE(same_bytes(full[r], want.data(), full_floats * sizeof(float))) << "rank " << r;
    ASSERT_EQ(strata_prefetcher_release(fetch[r], shard[r], nullptr), STRATA_OK);
  }
  // Rank 0's shard unregistered: its full buffer, still held, is not handed
  // out stale.
  ASSERT_EQ(strata_residency_unregister(res[0], shard[0]), STRATA_OK);
  void* stale = nullptr;
  EXPECT_EQ(strata_prefetcher_acquire_mode(fetch[0], shard[0], nullptr, STRATA_READ_ONLY, &stale),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(stale, nullptr);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(strata_prefetcher_destroy(fetch[r]), STRATA_OK);
    if (r != 0) {
      ASSERT_EQ(strata_residency_unregister(res[r], shard[r]), STRATA_OK);
    }
    ASSERT_EQ(strata_residency_destroy(res[r]), STRATA_OK);
  }
  for (strata_comm* c : comm) ASSERT_EQ(strata_comm_destroy(c), STRATA_OK);
  for (strata_allocator* a : alloc) ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

}  // namespace
}  // namespace strata::testing
