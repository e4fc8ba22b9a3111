// The C APIs of the communicators and the gradient buckets
// (strata/collectives.h, strata/gradients.h) on two local ranks: the same
// results as the C++ API, the borrow rules (a communicator outlives its
// buckets, an allocator its communicator), and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "strata/c_extension.hpp"
#include "strata/gradients.h"

// collectives_c_calls.c, compiled as C.
extern "C" strata_status c_sum_in_place(strata_comm* c, float* x, size_t count);
extern "C" strata_status c_backward_done(strata_gradient_buckets* b, size_t params);

namespace {

struct c_ranks {
  strata_allocator* alloc[2] = {nullptr, nullptr};
  strata_comm* comm[2] = {nullptr, nullptr};

  c_ranks() {
    for (auto*& a : alloc) {
      EXPECT_EQ(strata_allocator_create("device:sim:capacity=64MiB", &a), STRATA_OK);
    }
    EXPECT_EQ(strata_comm_create_local(alloc, 2, nullptr, comm), STRATA_OK)
        << strata_last_error_message();
  }
  c_ranks(const c_ranks&) = delete;
  c_ranks& operator=(const c_ranks&) = delete;
  c_ranks(c_ranks&&) = delete;
  c_ranks& operator=(c_ranks&&) = delete;
  ~c_ranks() {
    for (strata_comm* c : comm) EXPECT_EQ(strata_comm_destroy(c), STRATA_OK);
    for (strata_allocator* a : alloc) EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
  }
  float* floats(int r, std::size_t n) {
    void* p = nullptr;
    EXPECT_EQ(strata_malloc(alloc[r], n * sizeof(float), &p), STRATA_OK);
    return static_cast<float*>(p);
  }
  // Waits for rank r's default stream (the C API has no stream calls; the
  // C++ allocator behind the handle does).
  void wait(int r) {
    strata::allocator* a = strata::c_api::borrow(alloc[r]);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->dev().synchronize_stream({}).ok());
    strata::c_api::give_back(alloc[r]);
    EXPECT_EQ(strata_comm_async_error(comm[r]), STRATA_OK);
  }
};

TEST(CollectivesCApi, AllReduceAndAllGatherOnTwoRanks) {
  c_ranks ranks;
  int rank = -1;
  int size = 0;
  ASSERT_EQ(strata_comm_rank(ranks.comm[1], &rank), STRATA_OK);
  ASSERT_EQ(strata_comm_size(ranks.comm[1], &size), STRATA_OK);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(size, 2);
  const std::size_t n = 1000;
  float* x[2] = {ranks.floats(0, n), ranks.floats(1, n)};
  float* g[2] = {ranks.floats(0, 2 * n), ranks.floats(1, 2 * n)};
  for (std::size_t i = 0; i < n; ++i) {
    x[0][i] = static_cast<float>(i);
    x[1][i] = 2.0F * static_cast<float>(i);
  }
  // One thread drives both ranks: each call only queues.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(strata_comm_all_gather(ranks.comm[r], x[r], g[r], n, STRATA_F32, nullptr), STRATA_OK);
  }
  for (int r = 0; r < 2; ++r) ASSERT_EQ(c_sum_in_place(ranks.comm[r], x[r], n), STRATA_OK);
  for (int r = 0; r < 2; ++r) ranks.wait(r);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(x[r][10], 30.0F);
    EXPECT_EQ(g[r][10], 10.0F);
    EXPECT_EQ(g[r][n + 10], 20.0F);
    ASSERT_EQ(strata_free(ranks.alloc[r], x[r]), STRATA_OK);
    ASSERT_EQ(strata_free(ranks.alloc[r], g[r]), STRATA_OK);
  }
}

TEST(CollectivesCApi, GradientBucketsAverageAcrossRanks) {
  c_ranks ranks;
  const strata_gradient_param params[] = {{300, STRATA_F32}, {5000, STRATA_F32}, {64, STRATA_F32}};
  strata_gradient_buckets* b[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(strata_gradient_buckets_create(ranks.comm[r], params, 3, nullptr,
                                             "first_bucket_bytes:2KiB,bucket_bytes:8KiB", &b[r]),
              STRATA_OK)
        << strata_last_error_message();
  }
  EXPECT_EQ(strata_comm_destroy(ranks.comm[0]), STRATA_ERROR_INVALID_ARGUMENT)
      << "the buckets still use it";
  for (strata_gradient_buckets* h : b) {
    ASSERT_EQ(strata_gradient_buckets_zero(h, nullptr), STRATA_OK);
    for (std::size_t p = 3; p-- > 0;) {
      ASSERT_EQ(strata_gradient_buckets_mark_ready(h, p, nullptr), STRATA_OK);
    }
  }
  for (strata_gradient_buckets* h : b) {
    ASSERT_EQ(strata_gradient_buckets_finish(h, nullptr), STRATA_OK);
  }
  // Step 2 (after the rebuild): rank r writes r + 1 everywhere; the average
  // is 1.5.
  for (int r = 0; r < 2; ++r) {
    ranks.wait(r);  // the step's reductions are done
    for (std::size_t p = 0; p < 3; ++p) {
      void* g = nullptr;
      ASSERT_EQ(strata_gradient_buckets_grad(b[r], p, &g), STRATA_OK);
      auto* f = static_cast<float*>(g);
      for (std::size_t i = 0; i < params[p].count; ++i) f[i] = static_cast<float>(r + 1);
    }
  }
  for (strata_gradient_buckets* h : b) ASSERT_EQ(c_backward_done(h, 3), STRATA_OK);
  for (int r = 0; r < 2; ++r) {
    ranks.wait(r);
    void* g = nullptr;
    ASSERT_EQ(strata_gradient_buckets_grad(b[r], 1, &g), STRATA_OK);
    EXPECT_EQ(static_cast<float*>(g)[4999], 1.5F);
    char* json = nullptr;
    ASSERT_EQ(strata_gradient_buckets_stats_json(b[r], &json), STRATA_OK);
    EXPECT_NE(std::string(json).find("\"steps\":2"), std::string::npos) << json;
    strata_string_free(json);
  }
  void* g = nullptr;
  EXPECT_EQ(strata_gradient_buckets_grad(b[0], 3, &g), STRATA_ERROR_INVALID_ARGUMENT);
  for (auto* h : b) ASSERT_EQ(strata_gradient_buckets_destroy(h), STRATA_OK);
  EXPECT_EQ(strata_gradient_buckets_finish(b[0], nullptr), STRATA_ERROR_INVALID_ARGUMENT)
      << "a destroyed handle";
}

TEST(CollectivesCApi, MistakesAreErrorsWithMessages) {
  c_ranks ranks;
  EXPECT_EQ(strata_allocator_destroy(ranks.alloc[0]), STRATA_ERROR_INVALID_ARGUMENT)
      << "its communicator still uses it";
  const std::string in_use = strata_last_error_message();
  EXPECT_NE(in_use.find("communicators"), std::string::npos) << in_use;
  EXPECT_EQ(in_use.find("a residency manager still"), std::string::npos) << in_use;
  float* x = ranks.floats(0, 4);
  EXPECT_EQ(strata_comm_all_reduce(ranks.comm[0], x, x, 4, static_cast<strata_dtype>(7),
                                   STRATA_REDUCE_SUM, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("dtype"), std::string::npos);
  EXPECT_EQ(strata_comm_all_reduce(ranks.comm[0], x, x, 4, STRATA_F32,
                                   static_cast<strata_reduce_op>(9), nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_free(ranks.alloc[0], x), STRATA_OK);
  const strata_gradient_param bad[] = {{10, STRATA_F32}};
  strata_gradient_buckets* b = nullptr;
  EXPECT_EQ(strata_gradient_buckets_create(ranks.comm[0], bad, 1, nullptr,
                                           "bucket_reduce_dtype:int8", &b),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("bucket_reduce_dtype"),
            std::string::npos);
  EXPECT_EQ(strata_gradient_buckets_create(nullptr, bad, 1, nullptr, nullptr, &b),
            STRATA_ERROR_INVALID_ARGUMENT);
  strata_allocator* one[] = {ranks.alloc[0]};
  strata_comm* c = nullptr;
  strata_local_comm_options o = strata_local_comm_defaults();
  o.timeout_ms = 0;
  EXPECT_EQ(strata_comm_create_local(one, 1, &o, &c), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_comm_create_local(one, 0, nullptr, &c), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_comm_rank(nullptr, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
}

// A collective on Strata's buffers touches no byte past their blocks: 100000
// floats on a 4000-byte allocation would overwrite the next allocation.
TEST(CollectivesCApi, ACollectiveLargerThanItsStrataBufferIsRefused) {
  c_ranks ranks;
  float* small[2] = {ranks.floats(0, 1000), ranks.floats(1, 1000)};
  float* next = ranks.floats(0, 1000);
  std::memset(next, 0x5a, 1000 * sizeof(float));
  EXPECT_EQ(strata_comm_all_reduce(ranks.comm[0], small[0], small[0], 100000, STRATA_F32,
                                   STRATA_REDUCE_SUM, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  const std::string why = strata_last_error_message();
  EXPECT_NE(why.find("all_reduce on rank 0"), std::string::npos) << why;
  EXPECT_NE(why.find("400000"), std::string::npos) << why;
  // All-gather writes size x count into recv: 600 floats from each of two
  // ranks do not fit a 1000-float block.
  EXPECT_EQ(strata_comm_all_gather(ranks.comm[1], small[1], small[1], 600, STRATA_F32, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  // A freed block is no buffer at all.
  float* gone = ranks.floats(0, 16);
  ASSERT_EQ(strata_free(ranks.alloc[0], gone), STRATA_OK);
  EXPECT_EQ(
      strata_comm_all_reduce(ranks.comm[0], gone, gone, 16, STRATA_F32, STRATA_REDUCE_SUM, nullptr),
      STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("not a live allocation"),
            std::string::npos);
  const auto* bytes = reinterpret_cast<const unsigned char*>(next);
  for (std::size_t i = 0; i < 1000 * sizeof(float); ++i) ASSERT_EQ(bytes[i], 0x5a) << i;
  // What fits still runs, on both ranks.
  for (float* s : small) std::fill(s, s + 1000, 1.0F);
  std::vector<std::thread> both;
  for (int r = 0; r < 2; ++r) {
    both.emplace_back([&, r] {
      EXPECT_EQ(strata_comm_all_reduce(ranks.comm[r], small[r], small[r], 1000, STRATA_F32,
                                       STRATA_REDUCE_SUM, nullptr),
                STRATA_OK);
    });
  }
  for (auto& t : both) t.join();
  for (int r = 0; r < 2; ++r) ranks.wait(r);
  EXPECT_EQ(small[0][999], 2.0F);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(strata_free(ranks.alloc[r], small[r]), STRATA_OK);
  EXPECT_EQ(strata_free(ranks.alloc[0], next), STRATA_OK);
}

}  // namespace
