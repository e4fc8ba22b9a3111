// The host kernels against plain scalar references (kernel_references.hpp):
// the float formats, pack, scale and axpy, and the thread pool; randomized
// sizes and values (fixed seed, printed on failure), special values,
// unaligned tails, aliasing rules, and the argument errors. Adam is in
// kernels_adam_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernel_references.hpp"
#include "strata/kernels.hpp"

namespace strata::testing {
namespace {

// --- the float formats ------------------------------------------------------

TEST(KernelCasts, EveryHalfAndBf16RoundTripsExactly) {
  auto pool = make_pool();
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> wide(all.size());
  std::vector<std::uint16_t> back(all.size());
  for (dtype t : {dtype::f16, dtype::bf16}) {
    ASSERT_TRUE(cast_copy_host(*pool, wide.data(), dtype::f32, all.data(), t, all.size()).ok());
    ASSERT_TRUE(cast_copy_host(*pool, back.data(), t, wide.data(), dtype::f32, all.size()).ok());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float expect = t == dtype::f16 ? ref_from_f16(all[i])
                                           : std::bit_cast<float>(std::uint32_t{all[i]} << 16);
      ASSERT_TRUE(same_float(wide[i], expect)) << "to f32 of 0x" << std::hex << i;
      if (std::isnan(wide[i])) {
        EXPECT_TRUE(std::isnan(t == dtype::f16
                                   ? ref_from_f16(back[i])
                                   : std::bit_cast<float>(std::uint32_t{back[i]} << 16)))
            << "NaN 0x" << std::hex << i << " did not stay a NaN";
      } else {
        ASSERT_EQ(back[i], all[i]) << "round trip of 0x" << std::hex << i;
      }
    }
  }
}

TEST(KernelCasts, RandomAndSpecialFloatsRoundToNearestEven) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto pool = make_pool();
  std::mt19937 rng(seed);
  std::vector<float> in;
  // Random bit patterns (every exponent), then the edges.
  for (int i = 0; i < 200000; ++i)
    in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  const float specials[] = {0.0F,
                            -0.0F,
                            65504.0F,
                            65519.99F,
                            65520.0F,
                            65536.0F,
                            1e30F,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::ldexp(1.0F, -24),
                            std::ldexp(1.0F, -25),
                            std::ldexp(1.5F, -25),
                            std::ldexp(1.0F, -14),
                            std::ldexp(1023.0F, -24),
                            std::ldexp(1.0F, -149),
                            1.0F + 0x1p-8F,
                            1.0F + 0x1p-11F,
                            1.0F + 3 * 0x1p-11F};
  for (float f : specials) {
    in.push_back(f);
    in.push_back(-f);
  }
  std::vector<std::uint16_t> h(in.size());
  std::vector<std::uint16_t> b(in.size());
  ASSERT_TRUE(cast_copy_host(*pool, h.data(), dtype::f16, in.data(), dtype::f32, in.size()).ok());
  ASSERT_TRUE(cast_copy_host(*pool, b.data(), dtype::bf16, in.data(), dtype::f32, in.size()).ok());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(ref_from_f16(h[i])));
      EXPECT_TRUE(std::isnan(std::bit_cast<float>(std::uint32_t{b[i]} << 16)));
      continue;
    }
    ASSERT_EQ(h[i], ref_f16(in[i]))
        << "f16 of " << in[i] << " (0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << ")";
    ASSERT_EQ(b[i], ref_bf16(in[i]))
        << "bf16 of " << in[i] << " (0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << ")";
  }
  // bf16 <-> f16 goes through f32 exactly.
  std::vector<std::uint16_t> hb(in.size());
  ASSERT_TRUE(cast_copy_host(*pool, hb.data(), dtype::f16, b.data(), dtype::bf16, in.size()).ok());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) continue;
    ASSERT_EQ(hb[i], ref_f16(std::bit_cast<float>(std::uint32_t{b[i]} << 16))) << i;
  }
}

TEST(KernelCasts, UnalignedTailsAndSameBufferCopies) {
  auto pool = make_pool();
  std::vector<float> in(100003);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.37F - 5000.0F;
  std::vector<std::uint16_t> out(in.size() + 1, 0xdead);
  // One element in: the destination is 2-byte but not 4-byte aligned.
  ASSERT_TRUE(
      cast_copy_host(*pool, out.data() + 1, dtype::bf16, in.data() + 1, dtype::f32, in.size() - 1)
          .ok());
  EXPECT_EQ(out[0], 0xdead) << "wrote before the destination";
  for (std::size_t i = 1; i < in.size(); ++i) ASSERT_EQ(out[i], ref_bf16(in[i])) << i;
  // Same buffer, same type: nothing to do; same buffer, other type: refused.
  EXPECT_TRUE(cast_copy_host(*pool, in.data(), dtype::f32, in.data(), dtype::f32, 10).ok());
  EXPECT_EQ(cast_copy_host(*pool, in.data(), dtype::bf16, in.data(), dtype::f32, 10).code(),
            errc::invalid_argument);
  EXPECT_EQ(cast_copy_host(*pool, nullptr, dtype::bf16, in.data(), dtype::f32, 10).code(),
            errc::invalid_argument);
  EXPECT_TRUE(cast_copy_host(*pool, nullptr, dtype::bf16, nullptr, dtype::f32, 0).ok());
  // A pointer not aligned to its element size is refused (loading through
  // it would be undefined behaviour), and nothing is written.
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  const auto misaligned = cast_copy_host(*pool, bytes + 1, dtype::bf16, in.data(), dtype::f32, 8);
  EXPECT_EQ(misaligned.code(), errc::invalid_argument);
  EXPECT_NE(misaligned.message().find("aligned"), std::string::npos) << misaligned.message();
  EXPECT_EQ(cast_copy_host(*pool, out.data(), dtype::bf16,
                           reinterpret_cast<unsigned char*>(in.data()) + 2, dtype::f32, 8)
                .code(),
            errc::invalid_argument);
  EXPECT_EQ(out[0], 0xdead) << "a refused cast wrote";
}

// --- pack, scale, axpy, the pool ---------------------------------------------

TEST(KernelPack, PackAndUnpackRoundTripAtAnyAlignment) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto pool = make_pool();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> sizes(0, 300000);
  std::vector<std::vector<unsigned char>> tensors(40);
  std::vector<pack_entry> entries;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].resize(sizes(rng) + 3);
    for (auto& b : tensors[i]) b = static_cast<unsigned char>(rng());
    const std::size_t skew = i % 3;  // unaligned starts
    offset += i % 4;                 // and gaps in the flat buffer
    entries.push_back({tensors[i].data() + skew, tensors[i].size() - skew, offset});
    offset += tensors[i].size() - skew;
  }
  std::vector<unsigned char> flat(offset + 8, 0);
  ASSERT_TRUE(pack_host(*pool, entries.data(), entries.size(), flat.data(), flat.size()).ok());
  for (const auto& e : entries) {
    ASSERT_EQ(std::memcmp(flat.data() + e.offset, e.tensor, e.bytes), 0);
  }
  const auto saved = tensors;
  for (auto& t : tensors) std::fill(t.begin(), t.end(), 0);
  ASSERT_TRUE(unpack_host(*pool, entries.data(), entries.size(), flat.data(), flat.size()).ok());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::size_t skew = i % 3;
    ASSERT_TRUE(std::equal(tensors[i].begin() + static_cast<std::ptrdiff_t>(skew), tensors[i].end(),
                           saved[i].begin() + static_cast<std::ptrdiff_t>(skew)))
        << "tensor " << i;
  }
}

TEST(KernelPack, OverlapsAndOutOfRangeEntriesAreRefused) {
  auto pool = make_pool();
  std::vector<unsigned char> a(100, 1);
  std::vector<unsigned char> b(100, 2);
  std::vector<unsigned char> flat(150, 0);
  pack_entry overlapping[] = {{a.data(), 100, 0}, {b.data(), 100, 50}};
  EXPECT_EQ(pack_host(*pool, overlapping, 2, flat.data(), flat.size()).code(),
            errc::invalid_argument);
  pack_entry past_end[] = {{a.data(), 100, 60}};
  EXPECT_EQ(pack_host(*pool, past_end, 1, flat.data(), flat.size()).code(), errc::invalid_argument);
  pack_entry into_itself[] = {{flat.data() + 10, 20, 100}};
  EXPECT_EQ(pack_host(*pool, into_itself, 1, flat.data(), flat.size()).code(),
            errc::invalid_argument);
  for (unsigned char c : flat) ASSERT_EQ(c, 0) << "a refused pack wrote";
  EXPECT_TRUE(pack_host(*pool, nullptr, 0, nullptr, 0).ok());
  // Two entries unpacking into the same bytes of one tensor: refused (for
  // pack the same tensor may be read twice).
  pack_entry same_destination[] = {{a.data(), 40, 0}, {a.data() + 20, 40, 50}};
  const status unpack = unpack_host(*pool, same_destination, 2, flat.data(), flat.size());
  EXPECT_EQ(unpack.code(), errc::invalid_argument);
  EXPECT_NE(unpack.message().find("tensor overlaps entry 0's tensor"), std::string::npos)
      << unpack.message();
  for (unsigned char c : a) ASSERT_EQ(c, 1) << "a refused unpack wrote";
  EXPECT_TRUE(pack_host(*pool, same_destination, 2, flat.data(), flat.size()).ok());
}

TEST(KernelAxpy, ScaleAndAccumulateMatchTheReference) {
  auto pool = make_pool();
  std::vector<float> x(100001);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.001F;
    y[i] = static_cast<float>(i % 7);
  }
  std::vector<float> ry = y;
  ASSERT_TRUE(axpy_host(*pool, y.data(), 0.25F, x.data(), x.size()).ok());
  for (std::size_t i = 0; i < y.size(); ++i) ry[i] = ry[i] + 0.25F * x[i];
  ASSERT_TRUE(scale_host(*pool, y.data(), 0.5F, y.size()).ok());
  for (float& f : ry) f = f * 0.5F;
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(same_float(y[i], ry[i])) << i;
  // y += a * y is allowed (the same buffer); a partial overlap is not.
  ASSERT_TRUE(axpy_host(*pool, y.data(), 1.0F, y.data(), 10).ok());
  EXPECT_TRUE(same_float(y[3], 2.0F * ry[3]));
  EXPECT_EQ(axpy_host(*pool, y.data() + 1, 1.0F, y.data(), 10).code(), errc::invalid_argument);
  EXPECT_EQ(scale_host(*pool, nullptr, 1.0F, 10).code(), errc::invalid_argument);
}

TEST(KernelPool, EveryIndexRunsExactlyOnceEvenWithConcurrentCallers) {
  auto pool = make_pool(4);
  EXPECT_EQ(pool->threads(), 4U);
  EXPECT_EQ(kernel_pool::create(5000).code(), errc::invalid_argument);
  struct counts {
    std::vector<std::atomic<int>> hits;
    explicit counts(std::size_t n) : hits(n) {}
  };
  const auto body = [](void* ctx, std::size_t begin, std::size_t end) {
    auto& c = *static_cast<counts*>(ctx);
    for (std::size_t i = begin; i < end; ++i) c.hits[i].fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{1000},
                            std::size_t{100003} + static_cast<std::size_t>(t)}) {
        counts c(n);
        pool->parallel_for(n, 7, body, &c);
        for (auto& h : c.hits) bad += h.load() != 1 ? 1 : 0;
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace strata::testing
