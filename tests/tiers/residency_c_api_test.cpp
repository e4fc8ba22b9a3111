// The residency manager's C API (strata/residency.h): configured by
// STRATA_CONF text, buffers through every tier and back with their bytes,
// the JSON stats, and the errors (bad conf, null and destroyed handles,
// unknown buffers, an allocator destroyed under a manager).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/c_extension.hpp"
#include "strata/residency.h"

extern "C" {
strata_status c_register_parameter(strata_residency* r, size_t bytes, uint64_t* handle);
int c_tier_of(strata_residency* r, uint64_t handle, strata_status* why);
}

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::string scratch() {
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/residency_c";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

// The allocator conf naming the device a test opens for `sim`: that sim
// device, or the cuda device over the stand-in driver when ctest runs the
// test there (stand_in_spec.hpp).
std::string device_conf(const std::string& sim) {
  return "device:" + test_device_spec(sim);
}

// A counter of the stats JSON, -1 if absent.
long long stat_of(strata_residency* r, const std::string& name) {
  char* json = nullptr;
  if (strata_residency_stats_json(r, &json) != STRATA_OK) return -1;
  const std::string text = json;
  strata_string_free(json);
  const auto at = text.find("\"" + name + "\":");
  return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + name.size() + 3);
}

// On the sim device (and the stand-in driver's GPUs, sim devices
// underneath), device memory is host memory: the test reads and writes it
// directly once the device is idle.
void wait_idle(strata_allocator* a) {
  strata::allocator* cpp = strata::c_api::borrow(a);
  ASSERT_NE(cpp, nullptr);
  const bool idle = cpp->dev().synchronize().ok();
  strata::c_api::give_back(a);
  ASSERT_TRUE(idle);
}

// An allocator on an 8 MiB sim device and a manager over it: a host tier
// of `host_capacity`, 1 MiB chunks, NVMe in the scratch directory.
void open_tiers(const char* host_capacity, strata_allocator*& a, strata_residency*& r) {
  ASSERT_EQ(strata_allocator_create(device_conf("sim:capacity=8MiB").c_str(), &a), STRATA_OK);
  const std::string conf = std::string("host_capacity:") + host_capacity +
                           ",host_chunk:1MiB,nvme_dir:" + scratch() +
                           ",nvme_block_size:256KiB,nvme_queue_depth:4";
  ASSERT_EQ(strata_residency_create(a, conf.c_str(), &r), STRATA_OK) << strata_last_error_message();
}

// Destroys what open_tiers made.
void close_tiers(strata_allocator* a, strata_residency* r) {
  EXPECT_EQ(strata_residency_destroy(r), STRATA_OK);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

TEST(ResidencyC, BuffersGoThroughEveryTierAndComeBackExact) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(device_conf("sim:capacity=16MiB").c_str(), &a), STRATA_OK)
      << strata_last_error_message();
  const std::string conf = "host_capacity:4MiB,host_chunk:1MiB,nvme_dir:" + scratch() +
                           ",nvme_block_size:256KiB,nvme_queue_depth:4";
  strata_residency* r = nullptr;
  ASSERT_EQ(strata_residency_create(a, conf.c_str(), &r), STRATA_OK) << strata_last_error_message();
  std::vector<std::uint64_t> handles(8);
  for (std::size_t k = 0; k < handles.size(); ++k) {
    ASSERT_EQ(c_register_parameter(r, 3 * mib, &handles[k]), STRATA_OK);
    void* p = nullptr;
    ASSERT_EQ(strata_residency_acquire(r, handles[k], nullptr, &p), STRATA_OK)
        << "buffer " << k << ": " << strata_last_error_message();
    wait_idle(a);
    std::memset(p, static_cast<int>(k + 1), 3 * mib);
    ASSERT_EQ(strata_residency_release(r, handles[k], nullptr), STRATA_OK);
  }
  EXPECT_GT(stat_of(r, "spills_to_host"), 0);
  EXPECT_GT(stat_of(r, "spills_to_nvme"), 0) << "24 MiB over a 16 MiB device and 4 MiB of host";
  strata_status why = STRATA_OK;
  EXPECT_EQ(c_tier_of(r, handles[0], &why), STRATA_TIER_NVME) << "the oldest went furthest";
  EXPECT_EQ(c_tier_of(r, handles.back(), &why), STRATA_TIER_DEVICE);
  for (std::size_t k = 0; k < handles.size(); ++k) {
    void* p = nullptr;
    ASSERT_EQ(strata_residency_acquire(r, handles[k], nullptr, &p), STRATA_OK)
        << "buffer " << k << ": " << strata_last_error_message();
    wait_idle(a);
    const std::vector<unsigned char> want(3 * mib, static_cast<unsigned char>(k + 1));
    EXPECT_EQ(std::memcmp(p, want.data(), want.size()), 0)
        << "buffer " << k << " came back changed";
    ASSERT_EQ(strata_residency_release(r, handles[k], nullptr), STRATA_OK);
  }
  EXPECT_GT(stat_of(r, "fills_from_nvme"), 0);
  EXPECT_GT(stat_of(r, "bytes_moved"), static_cast<long long>(8 * mib));
  for (const std::uint64_t h : handles) EXPECT_EQ(strata_residency_unregister(r, h), STRATA_OK);
  EXPECT_EQ(stat_of(r, "device_bytes") + stat_of(r, "host_bytes") + stat_of(r, "nvme_bytes"), 0);
  close_tiers(a, r);
}

// STRATA_READ_ONLY acquires: once every buffer was filled back read-only,
// spilling them again copies nothing back and writes nothing to NVMe.
// STRATA_HOST_ONLY buffers spill to host memory but never to NVMe: when the
// host tier is full, the evictable ones go down instead, even the most
// recently used; bytes come back exact from wherever they were.
TEST(ResidencyC, HostOnlyBuffersNeverGoToNvme) {
  strata_allocator* a = nullptr;
  strata_residency* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_tiers("8MiB", a, r));
  // Four host-only buffers first (least recently used), then six others:
  // 20 MiB over an 8 MiB device and 8 MiB of host memory.
  std::vector<std::uint64_t> handles(10);
  for (std::size_t k = 0; k < handles.size(); ++k) {
    const auto policy = k < 4 ? STRATA_HOST_ONLY : STRATA_EVICTABLE;
    ASSERT_EQ(
        strata_residency_register(r, 2 * mib, STRATA_BUFFER_OPTIMIZER_STATE, policy, &handles[k]),
        STRATA_OK);
  }
  for (std::size_t round = 0; round < 3; ++round) {
    for (std::size_t k = 0; k < handles.size(); ++k) {
      void* p = nullptr;
      ASSERT_EQ(strata_residency_acquire(r, handles[k], nullptr, &p), STRATA_OK)
          << "round " << round << ", buffer " << k << ": " << strata_last_error_message();
      wait_idle(a);
      const auto* bytes = static_cast<const unsigned char*>(p);
      if (round > 0) {
        EXPECT_EQ(bytes[0], round * 16 + k) << "buffer " << k;
        EXPECT_EQ(bytes[2 * mib - 1], round * 16 + k) << "buffer " << k;
      }
      std::memset(p, static_cast<int>((round + 1) * 16 + k), 2 * mib);
      ASSERT_EQ(strata_residency_release(r, handles[k], nullptr), STRATA_OK);
      for (std::size_t j = 0; j < 4; ++j) {
        strata_tier where = STRATA_TIER_NONE;
        ASSERT_EQ(strata_residency_where(r, handles[j], &where), STRATA_OK);
        EXPECT_NE(where, STRATA_TIER_NVME) << "host-only buffer " << j;
      }
    }
  }
  EXPECT_GT(stat_of(r, "spills_to_nvme"), 0) << "the evictable buffers made the room";
  close_tiers(a, r);
}

// A host_only buffer larger than the host tier is not streamed to NVMe
// (as an evictable one would be): the acquire that needs its room fails,
// saying why, and the buffer stays on the device with its bytes.
TEST(ResidencyC, AHostOnlyBufferTheHostCannotHoldStaysAndTheAcquireSaysWhy) {
  strata_allocator* a = nullptr;
  strata_residency* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_tiers("4MiB", a, r));
  std::uint64_t kept = 0;
  std::uint64_t other = 0;
  ASSERT_EQ(strata_residency_register(r, 6 * mib, STRATA_BUFFER_OTHER, STRATA_HOST_ONLY, &kept),
            STRATA_OK);
  ASSERT_EQ(strata_residency_register(r, 6 * mib, STRATA_BUFFER_OTHER, STRATA_EVICTABLE, &other),
            STRATA_OK);
  void* p = nullptr;
  ASSERT_EQ(strata_residency_acquire(r, kept, nullptr, &p), STRATA_OK);
  wait_idle(a);
  std::memset(p, 0x5a, 6 * mib);
  ASSERT_EQ(strata_residency_release(r, kept, nullptr), STRATA_OK);
  void* q = nullptr;
  EXPECT_EQ(strata_residency_acquire(r, other, nullptr, &q), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(strata_last_error_message()).find("host_only"), std::string::npos)
      << strata_last_error_message();
  strata_tier where = STRATA_TIER_NONE;
  ASSERT_EQ(strata_residency_where(r, kept, &where), STRATA_OK);
  EXPECT_EQ(where, STRATA_TIER_DEVICE);
  EXPECT_EQ(stat_of(r, "spills_to_nvme"), 0);
  ASSERT_EQ(strata_residency_acquire(r, kept, nullptr, &p), STRATA_OK);
  wait_idle(a);
  EXPECT_EQ(static_cast<unsigned char*>(p)[6 * mib - 1], 0x5a);
  ASSERT_EQ(strata_residency_release(r, kept, nullptr), STRATA_OK);
  close_tiers(a, r);
}

// A host_only buffer the host tier cannot take now is passed over: the
// next victim, an evictable one, goes to NVMe instead and the acquire
// succeeds.
TEST(ResidencyC, AHostOnlyVictimWithNoHostRoomIsPassedOver) {
  strata_allocator* a = nullptr;
  strata_residency* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_tiers("4MiB", a, r));
  enum { c, oldest, evictable, last };  // C fills the host tier first
  const strata_residency_policy policy[] = {STRATA_HOST_ONLY, STRATA_HOST_ONLY, STRATA_EVICTABLE,
                                            STRATA_EVICTABLE};
  std::uint64_t h[4] = {};
  for (int k = c; k <= last; ++k) {
    ASSERT_EQ(strata_residency_register(r, 3 * mib, STRATA_BUFFER_OTHER, policy[k], &h[k]),
              STRATA_OK);
    void* p = nullptr;
    ASSERT_EQ(strata_residency_acquire(r, h[k], nullptr, &p), STRATA_OK)
        << "buffer " << k << ": " << strata_last_error_message();
    ASSERT_EQ(strata_residency_release(r, h[k], nullptr), STRATA_OK);
  }
  const strata_tier want[] = {STRATA_TIER_HOST, STRATA_TIER_DEVICE, STRATA_TIER_NVME,
                              STRATA_TIER_DEVICE};
  for (int k = c; k <= last; ++k) {
    strata_tier where = STRATA_TIER_NONE;
    ASSERT_EQ(strata_residency_where(r, h[k], &where), STRATA_OK);
    EXPECT_EQ(where, want[k]) << "buffer " << k;
  }
  close_tiers(a, r);
}

// STRATA_NVME_HOME: the last release writes the buffer to NVMe (nested
// acquires keep it), a read-only use goes back with no write, and the
// bytes come back exact; without an NVMe tier the policy is refused.
TEST(ResidencyC, NvmeHomeBuffersGoToNvmeAtTheirLastRelease) {
  strata_allocator* a = nullptr;
  strata_residency* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_tiers("4MiB", a, r));
  std::uint64_t h = 0;
  ASSERT_EQ(
      strata_residency_register(r, 3 * mib, STRATA_BUFFER_OPTIMIZER_STATE, STRATA_NVME_HOME, &h),
      STRATA_OK);
  const auto where = [&] {
    strata_tier t = STRATA_TIER_NONE;
    EXPECT_EQ(strata_residency_where(r, h, &t), STRATA_OK);
    return t;
  };
  void* p = nullptr;
  ASSERT_EQ(strata_residency_acquire(r, h, nullptr, &p), STRATA_OK);
  ASSERT_EQ(strata_residency_acquire(r, h, nullptr, &p), STRATA_OK);
  wait_idle(a);
  std::memset(p, 0x3c, 3 * mib);
  ASSERT_EQ(strata_residency_release(r, h, nullptr), STRATA_OK);
  EXPECT_EQ(where(), STRATA_TIER_DEVICE) << "still acquired once";
  ASSERT_EQ(strata_residency_release(r, h, nullptr), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(where(), STRATA_TIER_NVME);
  const long long written = stat_of(r, "bytes_to_nvme");
  EXPECT_GE(written, static_cast<long long>(3 * mib));
  ASSERT_EQ(strata_residency_acquire_mode(r, h, nullptr, STRATA_READ_ONLY, &p), STRATA_OK);
  wait_idle(a);
  EXPECT_EQ(static_cast<unsigned char*>(p)[0], 0x3c);
  EXPECT_EQ(static_cast<unsigned char*>(p)[3 * mib - 1], 0x3c);
  ASSERT_EQ(strata_residency_release(r, h, nullptr), STRATA_OK);
  EXPECT_EQ(where(), STRATA_TIER_NVME);
  EXPECT_EQ(stat_of(r, "bytes_to_nvme"), written) << "an unwritten buffer goes back for free";
  EXPECT_EQ(strata_residency_destroy(r), STRATA_OK);

  ASSERT_EQ(strata_residency_create(a, "host_capacity:4MiB", &r), STRATA_OK);
  EXPECT_EQ(strata_residency_register(r, mib, STRATA_BUFFER_OTHER, STRATA_NVME_HOME, &h),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error_message()).find("nvme_dir"), std::string::npos);
  close_tiers(a, r);
}

TEST(ResidencyC, ReadOnlyAcquiresMoveNoBytesBack) {
  strata_allocator* a = nullptr;
  strata_residency* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_tiers("4MiB", a, r));
  std::vector<std::uint64_t> handles(6);
  for (std::size_t k = 0; k < handles.size(); ++k) {
    ASSERT_EQ(c_register_parameter(r, 2 * mib, &handles[k]), STRATA_OK);
    void* p = nullptr;
    ASSERT_EQ(strata_residency_acquire_mode(r, handles[k], nullptr, STRATA_READ_WRITE, &p),
              STRATA_OK);
    wait_idle(a);
    std::memset(p, static_cast<int>(k + 1), 2 * mib);
    ASSERT_EQ(strata_residency_release(r, handles[k], nullptr), STRATA_OK);
  }
  const auto read_all = [&] {
    for (std::size_t k = 0; k < handles.size(); ++k) {
      void* p = nullptr;
      ASSERT_EQ(strata_residency_acquire_mode(r, handles[k], nullptr, STRATA_READ_ONLY, &p),
                STRATA_OK)
          << strata_last_error_message();
      wait_idle(a);
      const std::vector<unsigned char> want(2 * mib, static_cast<unsigned char>(k + 1));
      EXPECT_EQ(std::memcmp(p, want.data(), want.size()), 0) << "buffer " << k;
      ASSERT_EQ(strata_residency_release(r, handles[k], nullptr), STRATA_OK);
    }
  };
  read_all();
  read_all();
  const long long to_host = stat_of(r, "bytes_to_host");
  const long long to_nvme = stat_of(r, "bytes_to_nvme");
  read_all();
  read_all();
  EXPECT_EQ(stat_of(r, "bytes_to_host"), to_host);
  EXPECT_EQ(stat_of(r, "bytes_to_nvme"), to_nvme);
  EXPECT_GT(stat_of(r, "clean_spills"), 0);
  for (const std::uint64_t h : handles) EXPECT_EQ(strata_residency_unregister(r, h), STRATA_OK);
  EXPECT_EQ(stat_of(r, "nvme_kept_bytes"), 0);
  close_tiers(a, r);
}

TEST(ResidencyC, ErrorsAreClear) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(device_conf("sim:capacity=16MiB").c_str(), &a), STRATA_OK);
  strata_residency* r = nullptr;
  EXPECT_EQ(strata_residency_create(a, "host_kept:2", &r), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "host_kept"), nullptr);
  EXPECT_EQ(strata_residency_create(nullptr, "", &r), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_create(a, "", nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_create(a, "nvme_dir:/no/such/dir", &r), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "/no/such/dir"), nullptr);
  ::setenv("STRATA_CONF", "nvme_queue_depth:0", 1);
  EXPECT_EQ(strata_residency_create(a, nullptr, &r), STRATA_ERROR_INVALID_ARGUMENT)
      << "NULL conf reads STRATA_CONF";
  ::unsetenv("STRATA_CONF");

  ASSERT_EQ(strata_residency_create(a, "", &r), STRATA_OK) << strata_last_error_message();
  std::uint64_t h = 0;
  EXPECT_EQ(strata_residency_register(r, 0, STRATA_BUFFER_OTHER, STRATA_EVICTABLE, &h),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      strata_residency_register(r, 100, static_cast<strata_buffer_kind>(9), STRATA_EVICTABLE, &h),
      STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_register(r, 100, STRATA_BUFFER_OTHER,
                                      static_cast<strata_residency_policy>(7), &h),
            STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_residency_register(r, 100, STRATA_BUFFER_GRADIENT, STRATA_PINNED_ON_DEVICE, &h),
            STRATA_OK);
  strata_status why = STRATA_OK;
  EXPECT_EQ(c_tier_of(r, h, &why), STRATA_TIER_NONE) << "no storage before the first acquire";
  EXPECT_EQ(c_tier_of(r, h + 1000, &why), -1);
  EXPECT_EQ(why, STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_release(r, h, nullptr), STRATA_ERROR_INVALID_ARGUMENT)
      << "not acquired";
  void* p = nullptr;
  EXPECT_EQ(strata_residency_acquire(r, h + 1000, nullptr, &p), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_acquire(r, h, nullptr, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_acquire_mode(r, h, nullptr, static_cast<strata_access_mode>(5), &p),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "access mode"), nullptr);
  ASSERT_EQ(strata_residency_acquire(r, h, nullptr, &p), STRATA_OK);
  EXPECT_EQ(strata_residency_unregister(r, h), STRATA_ERROR_INVALID_ARGUMENT) << "still acquired";

  EXPECT_EQ(strata_allocator_destroy(a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "residency manager"), nullptr);
  EXPECT_EQ(strata_residency_destroy(r), STRATA_OK) << "frees the acquired buffer too";
  EXPECT_EQ(strata_residency_destroy(r), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_register(r, 100, STRATA_BUFFER_OTHER, STRATA_EVICTABLE, &h),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "destroyed"), nullptr);
  char* json = nullptr;
  EXPECT_EQ(strata_residency_stats_json(nullptr, &json), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
  EXPECT_EQ(strata_residency_create(a, "", &r), STRATA_ERROR_INVALID_ARGUMENT)
      << "a destroyed allocator";
}

TEST(ResidencyC, HostHoldsThroughTheCApi) {
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(device_conf("sim:capacity=16MiB").c_str(), &a), STRATA_OK);
  strata_residency* r = nullptr;
  ASSERT_EQ(strata_residency_create(a, "", &r), STRATA_OK) << strata_last_error_message();
  std::uint64_t h = 0;
  ASSERT_EQ(strata_residency_register(r, 4096, STRATA_BUFFER_OPTIMIZER_STATE, STRATA_EVICTABLE, &h),
            STRATA_OK);
  void* p = nullptr;
  EXPECT_EQ(strata_residency_acquire_host(r, h, STRATA_READ_WRITE, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_acquire_host(r, h, static_cast<strata_access_mode>(5), &p),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_acquire_host(nullptr, h, STRATA_READ_WRITE, &p),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_residency_release_host(r, h), STRATA_ERROR_INVALID_ARGUMENT) << "not held";
  ASSERT_EQ(strata_residency_acquire_host(r, h, STRATA_READ_WRITE, &p), STRATA_OK)
      << strata_last_error_message();
  std::memset(p, 0x3c, 4096);
  strata_status why = STRATA_OK;
  EXPECT_EQ(c_tier_of(r, h, &why), STRATA_TIER_HOST);
  void* dev = nullptr;
  EXPECT_EQ(strata_residency_acquire(r, h, nullptr, &dev), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "acquired on the host"), nullptr);
  ASSERT_EQ(strata_residency_release_host(r, h), STRATA_OK);
  ASSERT_EQ(strata_residency_acquire(r, h, nullptr, &dev), STRATA_OK);
  ASSERT_EQ(strata_stream_synchronize(a, nullptr), STRATA_OK);
  EXPECT_EQ(static_cast<const unsigned char*>(dev)[4095], 0x3c) << "the host's bytes, filled";
  ASSERT_EQ(strata_residency_release(r, h, nullptr), STRATA_OK);
  EXPECT_EQ(strata_residency_destroy(r), STRATA_OK);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

}  // namespace
}  // namespace strata::testing
