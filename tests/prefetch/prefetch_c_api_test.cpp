// The prefetcher's C API: create over a residency manager, steps, acquire,
// hints, stats, and the order of destruction.
#include <gtest/gtest.h>

#include <string>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/prefetch.h"

namespace {

TEST(PrefetchCApi, StepsHintsStatsAndDestroyOrder) {
  // The sim device, or the cuda device over the stand-in driver when ctest
  // runs the test there (stand_in_spec.hpp).
  const auto device = strata::testing::stand_in_spec("sim:capacity=8MiB");
  ASSERT_TRUE(device.ok()) << device.error().to_string();
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(("device:" + *device).c_str(), &a), STRATA_OK);
  strata_residency* r = nullptr;
  ASSERT_EQ(strata_residency_create(a, "host_capacity:32MiB", &r), STRATA_OK);
  strata_prefetcher* p = nullptr;
  EXPECT_EQ(strata_prefetcher_create(r, "prefetch_inflight:0", &p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("prefetch_inflight"), std::string::npos);
  EXPECT_EQ(strata_prefetcher_create(nullptr, nullptr, &p), STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_prefetcher_create(r, "prefetch_bytes:4MiB,device_lookahead:4MiB", &p),
            STRATA_OK);
  EXPECT_EQ(strata_residency_destroy(r), STRATA_ERROR_INVALID_ARGUMENT)
      << "a residency manager went before its prefetcher";
  uint64_t h[5];
  for (auto& handle : h) {
    ASSERT_EQ(
        strata_residency_register(r, 2 << 20, STRATA_BUFFER_PARAMETER, STRATA_EVICTABLE, &handle),
        STRATA_OK);
  }
  for (int step = 0; step < 3; ++step) {
    ASSERT_EQ(strata_prefetcher_begin_step(p), STRATA_OK);
    for (const uint64_t handle : h) {
      void* ptr = nullptr;
      // Odd steps only read the buffers.
      ASSERT_EQ(step % 2 == 0
                    ? strata_prefetcher_acquire(p, handle, nullptr, &ptr)
                    : strata_prefetcher_acquire_mode(p, handle, nullptr, STRATA_READ_ONLY, &ptr),
                STRATA_OK);
      EXPECT_NE(ptr, nullptr);
      ASSERT_EQ(strata_prefetcher_release(p, handle, nullptr), STRATA_OK);
    }
    ASSERT_EQ(strata_prefetcher_end_step(p), STRATA_OK);
  }
  EXPECT_EQ(strata_prefetcher_end_step(p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_prefetcher_hint(p, h[0]), STRATA_OK);
  EXPECT_EQ(strata_prefetcher_hint(p, 999), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_prefetcher_acquire(p, h[0], nullptr, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  void* ptr = nullptr;
  EXPECT_EQ(
      strata_prefetcher_acquire_mode(p, h[0], nullptr, static_cast<strata_access_mode>(7), &ptr),
      STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("access mode"), std::string::npos);
  // A host hold, outside a step: nothing recorded.
  ASSERT_EQ(strata_prefetcher_acquire_host(p, h[1], STRATA_READ_ONLY, &ptr), STRATA_OK);
  EXPECT_NE(ptr, nullptr);
  EXPECT_EQ(strata_prefetcher_acquire(p, h[1], nullptr, &ptr), STRATA_ERROR_INVALID_ARGUMENT)
      << "held on the host";
  ASSERT_EQ(strata_prefetcher_release_host(p, h[1]), STRATA_OK);
  EXPECT_EQ(strata_prefetcher_release_host(p, h[1]), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_prefetcher_acquire_host(p, h[1], STRATA_READ_ONLY, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_prefetcher_acquire_host(p, 999, STRATA_READ_ONLY, &ptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  char* json = nullptr;
  ASSERT_EQ(strata_prefetcher_stats_json(p, &json), STRATA_OK);
  EXPECT_NE(std::string(json).find("\"steps\":3"), std::string::npos) << json;
  strata_string_free(json);
  int64_t hints = -1;
  ASSERT_EQ(strata_get_stat(a, "prefetch.hints", &hints), STRATA_OK);
  EXPECT_EQ(hints, 2);
  ASSERT_EQ(strata_prefetcher_destroy(p), STRATA_OK);
  EXPECT_EQ(strata_prefetcher_destroy(p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_prefetcher_begin_step(p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_get_stat(a, "prefetch.hints", &hints), STRATA_ERROR_INVALID_ARGUMENT)
      << "the stats section outlived the prefetcher";
  for (const uint64_t handle : h) EXPECT_EQ(strata_residency_unregister(r, handle), STRATA_OK);
  ASSERT_EQ(strata_residency_destroy(r), STRATA_OK);
  ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

}  // namespace
