// access_mode::overwrite: an acquire that writes every byte before reading
// any (a gradient's first accumulation of a step). A buffer spilled to the
// host or to NVMe is not filled back: its copies there are freed, nothing
// is copied or read, and the bytes written under the acquire are the ones
// every later use sees. A buffer on the device is handed out as it is.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "residency_setup.hpp"
#include "strata/residency.h"

namespace strata::testing {
namespace {

constexpr std::size_t bytes = 2 * mib;

struct spilled {
  setup s = make("sim:capacity=8MiB", small_tiers());
  std::uint64_t h = 0;
  std::vector<std::uint64_t> others;

  // h holds `fill` and is pushed off the device, and with `to_nvme` on to
  // NVMe (six more 2 MiB buffers crowd the 8 MiB host tier).
  void push(unsigned char fill, bool to_nvme) {
    residency_manager& m = *s.manager;
    h = *m.register_buffer(bytes, buffer_kind::gradient, residency_policy::evictable);
    write(fill);
    for (int i = 0; i < (to_nvme ? 6 : 3); ++i) {
      others.push_back(
          *m.register_buffer(bytes, buffer_kind::gradient, residency_policy::evictable));
      auto p = m.acquire(others.back(), nullptr);
      ASSERT_TRUE(p.ok()) << p.error().to_string();
      ASSERT_TRUE(m.release(others.back(), nullptr).ok());
    }
    // A plain allocation of the rest of the device spills what is released.
    auto big = s.alloc->try_malloc(7 * mib);
    ASSERT_TRUE(big.ok()) << big.error().to_string();
    ASSERT_TRUE(s.alloc->try_free(*big).ok());
    ASSERT_EQ(*m.where(h), to_nvme ? tier::nvme : tier::host);
  }
  void write(unsigned char fill, access_mode mode = access_mode::read_write) {
    auto p = s.manager->acquire(h, nullptr, mode);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    ASSERT_TRUE(s.alloc->dev().synchronize_stream({}).ok());
    std::memset(*p, fill, bytes);
    ASSERT_TRUE(s.manager->release(h, nullptr).ok());
  }
  // Whether every byte of h, read on the device, is `fill`.
  bool holds(unsigned char fill) {
    auto p = s.manager->acquire(h, nullptr, access_mode::read_only);
    EXPECT_TRUE(p.ok());
    if (!p) return false;
    EXPECT_TRUE(s.alloc->dev().synchronize_stream({}).ok());
    std::vector<unsigned char> want(bytes, fill);
    const bool same = std::memcmp(*p, want.data(), bytes) == 0;
    EXPECT_TRUE(s.manager->release(h, nullptr).ok());
    return same;
  }
};

// Pushes t's buffer off the device (on to NVMe with `to_nvme`) and
// overwrites it: nothing comes back, the copy below is freed, the bytes
// written under the overwrite are the buffer's.
void overwrite_spilled(spilled& t, bool to_nvme) {
  ASSERT_NO_FATAL_FAILURE(t.push(0x11, to_nvme));
  const auto before = t.s.manager->stats();
  ASSERT_NO_FATAL_FAILURE(t.write(0x22, access_mode::overwrite));
  const auto after = t.s.manager->stats();
  EXPECT_EQ(after.fills_from_host + after.fills_from_nvme,
            before.fills_from_host + before.fills_from_nvme);
  EXPECT_EQ(after.bytes_from_host + after.bytes_from_nvme,
            before.bytes_from_host + before.bytes_from_nvme);
  EXPECT_EQ(after.host_bytes + after.nvme_bytes, before.host_bytes + before.nvme_bytes - bytes)
      << "its copy below was freed";
  EXPECT_TRUE(t.holds(0x22));
}

TEST(Overwrite, ABufferOnTheHostIsNotCopiedBack) {
  spilled t;
  ASSERT_TRUE(t.s.manager);
  ASSERT_NO_FATAL_FAILURE(overwrite_spilled(t, false));
  // Spilled again, it comes back with the bytes written under the overwrite.
  auto big = t.s.alloc->try_malloc(7 * mib);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(t.s.alloc->try_free(*big).ok());
  EXPECT_NE(*t.s.manager->where(t.h), tier::device);
  EXPECT_TRUE(t.holds(0x22));
}

TEST(Overwrite, ABufferOnNvmeIsNotRead) {
  spilled t;
  ASSERT_TRUE(t.s.manager);
  ASSERT_NO_FATAL_FAILURE(overwrite_spilled(t, true));
  // On the host too: held there for an overwrite, it is not read either.
  for (const auto o : t.others) {
    ASSERT_TRUE(t.s.manager->acquire(o, nullptr).ok());
    ASSERT_TRUE(t.s.manager->release(o, nullptr).ok());
  }
  auto big = t.s.alloc->try_malloc(7 * mib);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(t.s.alloc->try_free(*big).ok());
  ASSERT_EQ(*t.s.manager->where(t.h), tier::nvme);
  const auto read_before = t.s.manager->stats().bytes_from_nvme;
  auto p = t.s.manager->acquire_host(t.h, access_mode::overwrite);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_EQ(t.s.manager->stats().bytes_from_nvme, read_before);
  std::memset(*p, 0x55, bytes);
  ASSERT_TRUE(t.s.manager->release_host(t.h).ok());
  EXPECT_TRUE(t.holds(0x55));
}

TEST(Overwrite, ABufferOnTheDeviceIsHandedOutAsItIs) {
  spilled t;
  ASSERT_TRUE(t.s.manager);
  t.h = *t.s.manager->register_buffer(bytes, buffer_kind::gradient, residency_policy::evictable);
  ASSERT_NO_FATAL_FAILURE(t.write(0x66));
  auto p = t.s.manager->acquire(t.h, nullptr, access_mode::overwrite);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(t.s.alloc->dev().synchronize_stream({}).ok());
  EXPECT_EQ(static_cast<unsigned char*>(*p)[bytes - 1], 0x66);
  ASSERT_TRUE(t.s.manager->release(t.h, nullptr).ok());
}

TEST(Overwrite, TheCApiTakesIt) {
  auto m = c_api::access_mode_of(STRATA_OVERWRITE);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, access_mode::overwrite);
  EXPECT_FALSE(c_api::access_mode_of(static_cast<strata_access_mode>(3)).ok());
}

}  // namespace
}  // namespace strata::testing
