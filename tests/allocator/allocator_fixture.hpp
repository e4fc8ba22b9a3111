// Helpers shared by the allocator suites: a sim device and an allocator on it.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>

#include "caching_allocator.hpp"
#include "sim_device.hpp"

namespace strata::testing {

/// An allocator on a fresh sim device described by `sim_spec` ("sim:...").
inline std::unique_ptr<caching_allocator> make_allocator(const std::string& sim_spec,
                                                         const allocator_options& options = {}) {
  auto dev = open_device(sim_spec);
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  if (!dev) return nullptr;
  auto a = caching_allocator::create(std::move(*dev), options);
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  return a ? std::move(*a) : nullptr;
}

/// An allocator on a fresh sim device with two streams created on it.
struct two_streams {
  std::unique_ptr<caching_allocator> alloc;
  std::array<void*, 2> streams{};
};
inline two_streams make_two_stream_allocator(const std::string& sim_spec) {
  two_streams out;
  auto dev = open_device(sim_spec);
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  if (!dev) return out;
  for (void*& s : out.streams) {
    auto made = (*dev)->create_stream();
    EXPECT_TRUE(made.ok());
    if (made) s = made->native;
  }
  auto a = caching_allocator::create(std::move(*dev), {});
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  if (a) out.alloc = std::move(*a);
  return out;
}

inline std::int64_t stat_of(caching_allocator& a, const std::string& name) {
  return a.stats().to_map().at(name);
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

}  // namespace strata::testing
