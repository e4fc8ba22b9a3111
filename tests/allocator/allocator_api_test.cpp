// The C API (strata.h) and the C++ API (strata.hpp) as a user calls them.
#include <gtest/gtest.h>

#include <string>

#include "strata/strata.h"
#include "strata/strata.hpp"

namespace strata::testing {
namespace {

TEST(CApi, AllocateFreeStatsAndReports) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create("device:sim:capacity=64MiB", &a), STRATA_OK)
      << strata_last_error_message();
  void* p = nullptr;
  ASSERT_EQ(strata_malloc(a, 3 << 20, &p), STRATA_OK);
  ASSERT_NE(p, nullptr);
  void* q = nullptr;
  ASSERT_EQ(strata_malloc_async(a, 4000, nullptr, &q), STRATA_OK);
  int64_t v = 0;
  ASSERT_EQ(strata_get_stat(a, "allocated_bytes.all.current", &v), STRATA_OK);
  EXPECT_EQ(v, (3 << 20) + 4096);
  EXPECT_EQ(strata_get_stat(a, "no.such.stat", &v), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("no.such.stat"), std::string::npos);
  char* text = nullptr;
  ASSERT_EQ(strata_memory_summary(a, &text), STRATA_OK);
  EXPECT_NE(std::string(text).find("Allocated memory"), std::string::npos);
  strata_string_free(text);
  ASSERT_EQ(strata_stats_json(a, &text), STRATA_OK);
  EXPECT_NE(std::string(text).find("\"num_ooms\":0"), std::string::npos);
  strata_string_free(text);
  ASSERT_EQ(strata_snapshot_json(a, &text), STRATA_OK);
  EXPECT_NE(std::string(text).find("\"arenas\""), std::string::npos);
  strata_string_free(text);
  EXPECT_EQ(strata_record_stream(a, p, nullptr), STRATA_OK);
  EXPECT_EQ(strata_stream_synchronize(a, nullptr), STRATA_OK);
  int not_a_stream = 0;
  EXPECT_EQ(strata_stream_synchronize(a, &not_a_stream), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_stream_synchronize(nullptr, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_free_async(a, q, nullptr), STRATA_OK);
  EXPECT_EQ(strata_free(a, p), STRATA_OK);
  EXPECT_EQ(strata_free(a, p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_trim(a, 0), STRATA_OK);
  EXPECT_EQ(strata_empty_cache(a), STRATA_OK);
  EXPECT_EQ(strata_set_memory_fraction(a, 0.5), STRATA_OK);
  EXPECT_EQ(strata_set_memory_fraction(a, -1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_reset_peak_stats(a), STRATA_OK);
  ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

TEST(CApi, ErrorsAreCodesWithMessages) {
  strata_allocator* a = nullptr;
  EXPECT_EQ(strata_allocator_create("colour:blue", &a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("colour"), std::string::npos);
  EXPECT_EQ(strata_allocator_create("device:sim:capacity=64MiB", nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(strata_error_string(STRATA_ERROR_OUT_OF_MEMORY), "out_of_memory");
  void* p = nullptr;
  EXPECT_EQ(strata_malloc(nullptr, 16, &p), STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_allocator_create("device:sim:capacity=16MiB", &a), STRATA_OK);
  EXPECT_EQ(strata_malloc(a, 1ull << 40, &p), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(strata_last_error_message()).find("out of memory"), std::string::npos);
  EXPECT_EQ(strata_malloc(a, 16, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

TEST(CApi, CallsAfterDestroyAreErrorsNotCrashes) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create("device:sim:capacity=16MiB", &a), STRATA_OK);
  void* p = nullptr;
  ASSERT_EQ(strata_malloc(a, 1 << 20, &p), STRATA_OK);
  ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
  EXPECT_EQ(strata_malloc(a, 16, &p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("destroyed"), std::string::npos);
  EXPECT_EQ(strata_free(a, p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_empty_cache(a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, ConfFromTheEnvironment) {
  ASSERT_EQ(setenv("STRATA_CONF", "device:sim:capacity=32MiB,memory_fraction:0.5", 1), 0);
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(nullptr, &a), STRATA_OK) << strata_last_error_message();
  void* p = nullptr;
  EXPECT_EQ(strata_malloc(a, 18 << 20, &p), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
  ASSERT_EQ(unsetenv("STRATA_CONF"), 0);
}

struct c_spiller {
  strata_allocator* a;
  void* held;
  std::size_t calls;
};

std::size_t spill(void* context, std::size_t bytes) {
  auto* s = static_cast<c_spiller*>(context);
  ++s->calls;
  if (s->held == nullptr || strata_free_async(s->a, s->held, nullptr) != STRATA_OK) return 0;
  s->held = nullptr;
  return bytes;
}

TEST(CApi, PressureHandlersTraceAndOomReport) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create("device:sim:capacity=16MiB,trace_buffer:64", &a), STRATA_OK)
      << strata_last_error_message();
  c_spiller s{a, nullptr, 0};
  ASSERT_EQ(strata_malloc_async(a, 12 << 20, nullptr, &s.held), STRATA_OK);
  std::uint64_t id = 0;
  EXPECT_EQ(strata_add_pressure_handler(a, nullptr, &s, &id), STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_add_pressure_handler(a, spill, &s, &id), STRATA_OK);
  void* p = nullptr;
  ASSERT_EQ(strata_malloc_async(a, 8 << 20, nullptr, &p), STRATA_OK);  // the handler spills
  EXPECT_EQ(s.calls, 1u);
  void* q = nullptr;
  EXPECT_EQ(strata_malloc_async(a, 12 << 20, nullptr, &q), STRATA_ERROR_OUT_OF_MEMORY);
  char* text = nullptr;
  ASSERT_EQ(strata_last_oom_report(a, &text), STRATA_OK);
  EXPECT_NE(std::string(text).find("\"requested\":12582912"), std::string::npos) << text;
  strata_string_free(text);
  ASSERT_EQ(strata_trace_json(a, &text), STRATA_OK);
  EXPECT_NE(std::string(text).find("\"action\":\"oom\""), std::string::npos) << text;
  strata_string_free(text);
  std::size_t size = 0;
  ASSERT_EQ(strata_snapshot_pickle(a, &text, &size), STRATA_OK);
  ASSERT_GT(size, 2u);
  EXPECT_EQ(static_cast<unsigned char>(text[0]), 0x80) << "pickle protocol opcode";
  EXPECT_EQ(text[size - 1], '.') << "pickle STOP opcode";
  strata_string_free(text);
  EXPECT_EQ(strata_remove_pressure_handler(a, id), STRATA_OK);
  EXPECT_EQ(strata_remove_pressure_handler(a, id), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

TEST(CppApi, RaiiAndExceptions) {
  auto a = allocator::from_conf("device:sim:capacity=64MiB");
  void* p = a.malloc(1 << 20);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stats().at("allocation.all.current"), 1);
  try {
    a.malloc(std::size_t{1} << 40);
    FAIL() << "no exception for an impossible request";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  int local = 0;
  EXPECT_THROW(a.free(&local), error);
  a.free(p);
  allocator moved = std::move(a);
  EXPECT_THROW(a.malloc(16), error);  // NOLINT(bugprone-use-after-move): checked on purpose
  EXPECT_NO_THROW(moved.empty_cache());
  EXPECT_THROW(allocator::from_conf("small_size:1"), error);
}

TEST(CppApi, ReportsAndPressureHandlers) {
  auto a = allocator::from_conf("device:sim:capacity=16MiB,trace_buffer:16");
  void* held = a.malloc_async(12 << 20, nullptr);
  const std::uint64_t id = a.add_pressure_handler([&](std::size_t bytes) -> std::size_t {
    a.free_async(held, nullptr);
    return bytes;
  });
  void* p = a.malloc_async(8 << 20, nullptr);
  EXPECT_NE(p, nullptr);
  a.remove_pressure_handler(id);
  EXPECT_THROW(a.remove_pressure_handler(id), error);
  EXPECT_EQ(a.last_oom_report(), "null");
  EXPECT_NE(a.trace_json().find("\"action\":\"alloc\""), std::string::npos);
  EXPECT_FALSE(a.snapshot_pickle().empty());
  a.free_async(p, nullptr);
}

TEST(CppApi, OwnershipAndAvailableMemoryForTheIntegrations) {
  auto a = allocator::from_conf("device:sim:capacity=64MiB");
  const memory_info empty = a.available_memory();
  EXPECT_EQ(empty.total, 64u << 20);
  EXPECT_EQ(empty.free, 64u << 20);
  void* small = a.malloc(4096);
  void* large = a.malloc_async(8 << 20, nullptr);
  EXPECT_TRUE(a.owns(small));
  EXPECT_TRUE(a.owns(large));
  int local = 0;
  EXPECT_FALSE(a.owns(&local)) << "a stack address is someone else's";
  EXPECT_FALSE(a.owns(nullptr));
  const memory_info busy = a.available_memory();
  EXPECT_LE(busy.free, (64u << 20) - (8u << 20)) << "allocated bytes are not available";
  a.free_async(large, nullptr);
  EXPECT_TRUE(a.owns(large)) << "freed, still Strata's address space: a second free is ours";
  EXPECT_THROW(a.free_async(large, nullptr), error);
  a.free(small);
  const memory_info cached = a.available_memory();
  EXPECT_GE(cached.free, busy.free + (8u << 20)) << "cached bytes count as available";
  a.set_memory_fraction(0.25);
  EXPECT_LE(a.available_memory().free, 16u << 20) << "the limit caps what is available";
}

}  // namespace
}  // namespace strata::testing
