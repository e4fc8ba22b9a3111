// Helpers shared by the allocator suites: a device and an allocator on it.
// The device is the sim device a test names, or, when ctest runs a suite
// over the stand-in driver (STRATA_TEST_CUDA_DRIVER), the cuda device with
// the stand-in configured from the same sim options.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>

#include "caching_allocator.hpp"
#include "fakecuda/fakecuda_control.hpp"
#include "fakecuda/stand_in_spec.hpp"
#include "sim_device.hpp"

namespace strata::testing {

/// The sim device `sim_spec` ("sim:key=value,..."), or the cuda device over
/// the stand-in configured with the same keys (see above).
inline result<std::unique_ptr<device>> open_test_device(const std::string& sim_spec) {
  auto spec = stand_in_spec(sim_spec);
  if (!spec) return spec.error();
  return open_device(*spec);
}

/// Makes the device's map call that follows `successes` successful ones
/// fail, once; returns the error the allocator then reports.
inline errc fail_map_after(device& d, std::uint64_t successes) {
  if (auto* sim = dynamic_cast<sim_device*>(&d); sim != nullptr) {
    sim->arm_fault(sim_fault::map, successes);
    return errc::injected_fault;
  }
  constexpr int cuda_error_unknown = 999;  // CUDA_ERROR_UNKNOWN
  EXPECT_NE(stand_in(), nullptr) << "failures are injected on sim or the stand-in only";
  if (stand_in() != nullptr) stand_in()->fail_call("cuMemMap", successes + 1, cuda_error_unknown);
  return errc::device_error;
}

/// An allocator on a fresh device described by `sim_spec` ("sim:...").
inline std::unique_ptr<caching_allocator> make_allocator(const std::string& sim_spec,
                                                         const allocator_options& options = {}) {
  auto dev = open_test_device(sim_spec);
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  if (!dev) return nullptr;
  auto a = caching_allocator::create(std::move(*dev), options);
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  return a ? std::move(*a) : nullptr;
}

/// An allocator on a fresh device with two streams created on it.
struct two_streams {
  std::unique_ptr<caching_allocator> alloc;
  std::array<void*, 2> streams{};
};
inline two_streams make_two_stream_allocator(const std::string& sim_spec,
                                             const allocator_options& options = {}) {
  two_streams out;
  auto dev = open_test_device(sim_spec);
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  if (!dev) return out;
  for (void*& s : out.streams) {
    auto made = (*dev)->create_stream();
    EXPECT_TRUE(made.ok());
    if (made) s = made->native;
  }
  auto a = caching_allocator::create(std::move(*dev), options);
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  if (a) out.alloc = std::move(*a);
  return out;
}

inline std::int64_t stat_of(caching_allocator& a, const std::string& name) {
  return a.stats().to_map().at(name);
}

/// Calls of kind `k` made on `d` so far.
inline std::uint64_t calls_of(device& d, driver_call k) {
  return d.call_totals()[static_cast<std::size_t>(k)].calls;
}

/// Memory driver calls made on `d` so far: create, release, map, unmap,
/// set_access.
inline std::uint64_t memory_calls(device& d) {
  std::uint64_t n = 0;
  for (driver_call k : {driver_call::create_pages, driver_call::release_pages, driver_call::map,
                        driver_call::unmap, driver_call::set_access}) {
    n += calls_of(d, k);
  }
  return n;
}

/// Fills `bytes` at `p` (host-visible sim memory) with a pattern from `seed`.
inline void fill(void* p, std::size_t bytes, std::uint32_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = static_cast<unsigned char>(seed + i * 131);
}

inline bool holds(const void* p, std::size_t bytes, std::uint32_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (b[i] != static_cast<unsigned char>(seed + i * 131)) return false;
  }
  return true;
}

/// Stamps `bytes` at `p` every 64 KiB and in its last 8 bytes (bytes >= 8)
/// from `seed`: cheap enough for large blocks, and any page of the block
/// mapped twice, or shared with another live block, overwrites a stamp.
inline void stamp(void* p, std::size_t bytes, std::uint64_t seed) {
  constexpr std::size_t every = std::size_t{64} * 1024;
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t off = 0; off + 16 <= bytes; off += every) {  // clear of the tail
    const std::uint64_t v = seed * 0x9e3779b97f4a7c15ULL + off;
    std::memcpy(b + off, &v, 8);
  }
  const std::uint64_t tail = ~seed;
  std::memcpy(b + bytes - 8, &tail, 8);
}

/// True when `bytes` at `p` still hold stamp(p, bytes, seed).
inline bool stamped(const void* p, std::size_t bytes, std::uint64_t seed) {
  constexpr std::size_t every = std::size_t{64} * 1024;
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t v = 0;
  for (std::size_t off = 0; off + 16 <= bytes; off += every) {
    std::memcpy(&v, b + off, 8);
    if (v != seed * 0x9e3779b97f4a7c15ULL + off) return false;
  }
  std::memcpy(&v, b + bytes - 8, 8);
  return v == ~seed;
}

}  // namespace strata::testing
