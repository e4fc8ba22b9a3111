// The host kernels against plain scalar references: randomized sizes and
// values (fixed seed, printed on failure), special values, unaligned tails,
// aliasing rules, and the argument errors.
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

#include "strata/kernels.hpp"

namespace strata {
namespace {

constexpr std::uint32_t seed = 20261123;

std::unique_ptr<kernel_pool> make_pool(unsigned threads = 3) {
  auto p = kernel_pool::create(threads);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  return std::move(*p);
}

// --- references -------------------------------------------------------------

// The nearest bf16 by comparing both neighbours in double; ties to even.
std::uint16_t ref_bf16(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  if (std::isinf(f)) return static_cast<std::uint16_t>(u >> 16);
  const std::uint32_t lo = u & 0xffff0000U;
  const std::uint32_t hi = lo + 0x10000U;  // next away from zero (may be inf)
  const double dlo =
      std::fabs(static_cast<double>(f) - static_cast<double>(std::bit_cast<float>(lo)));
  const double hv = (hi & 0x7fffffffU) >= 0x7f800000U
                        ? std::copysign(std::ldexp(1.0, 128), static_cast<double>(f))
                        : static_cast<double>(std::bit_cast<float>(hi));
  const double dhi = std::fabs(hv - static_cast<double>(f));
  if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1U) == 0))
    return static_cast<std::uint16_t>(lo >> 16);
  return static_cast<std::uint16_t>(hi >> 16);
}

// binary16 by its definition (not the compiler's: clang 14 has no _Float16
// on x86): the representable value nearest |f|, ties to the even
// significand, infinity from 65520 (the midpoint above 65504) up.
std::uint16_t ref_f16(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000U : 0U;
  if (std::isnan(f)) return sign | 0x7e00U;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00U;
  int e = 0;
  std::frexp(a, &e);  // 2^(e-1) <= a < 2^e
  const double ulp = std::ldexp(1.0, std::max(e - 11, -24));
  const double v = std::nearbyint(a / ulp) * ulp;  // default rounding: to even
  if (v < 0x1p-14) return sign | static_cast<std::uint16_t>(v / 0x1p-24);
  const double m = std::frexp(v, &e);  // v = m * 2^e, 0.5 <= m < 1
  return sign | static_cast<std::uint16_t>(((e + 14) << 10) | (static_cast<int>(m * 2048) - 1024));
}
float ref_from_f16(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  double v = 0;
  if (exp == 0) {
    v = std::ldexp(man, -24);
  } else if (exp == 31) {
    v = man == 0 ? std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1024 + man, exp - 25);
  }
  return static_cast<float>((h & 0x8000U) != 0 ? -v : v);
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Distance in units in the last place (same sign assumed near each other).
std::int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  const auto key = [](float x) {
    const auto i = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(x));
    return i < 0 ? std::int64_t{INT32_MIN} - i : i;
  };
  return std::llabs(key(a) - key(b));
}

float grad_value(const void* g, dtype t, std::size_t i) {
  switch (t) {
    case dtype::f32:
      return static_cast<const float*>(g)[i];
    case dtype::bf16:
      return std::bit_cast<float>(std::uint32_t{static_cast<const std::uint16_t*>(g)[i]} << 16);
    case dtype::f16:
      return ref_from_f16(static_cast<const std::uint16_t*>(g)[i]);
  }
  return 0;
}

// PyTorch's single-tensor Adam, one element at a time.
void ref_adam(std::vector<float>& p, const void* g, dtype gt, std::vector<float>& m,
              std::vector<float>& v, std::vector<float>& vmax, const adam_options& o,
              std::uint64_t step) {
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const auto step_size = static_cast<float>(-(o.lr / bias1));
  const auto b2sqrt = static_cast<float>(std::sqrt(bias2));
  for (std::size_t i = 0; i < p.size(); ++i) {
    float grad = grad_value(g, gt, i);
    if (o.maximize) grad = -grad;
    if (o.weight_decay != 0.0) {
      if (o.decoupled_weight_decay) {
        p[i] *= static_cast<float>(1.0 - o.lr * o.weight_decay);
      } else {
        grad += static_cast<float>(o.weight_decay) * p[i];
      }
    }
    m[i] = m[i] * static_cast<float>(o.beta1) + static_cast<float>(1.0 - o.beta1) * grad;
    v[i] = v[i] * static_cast<float>(o.beta2) + (static_cast<float>(1.0 - o.beta2) * grad) * grad;
    float vd = v[i];
    if (o.amsgrad) {
      vmax[i] = std::max(vmax[i], v[i]);
      vd = vmax[i];
    }
    const float denom = std::sqrt(vd) / b2sqrt + static_cast<float>(o.eps);
    p[i] = p[i] + step_size * (m[i] / denom);
  }
}

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

// --- Adam -------------------------------------------------------------------

struct adam_case {
  dtype grad = dtype::f32;
  dtype out = dtype::f32;
  bool has_out = false;
  adam_options o;
};

void check_adam_case(kernel_pool& pool, const adam_case& c, std::size_t n, std::size_t skew,
                     std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0F, 1.0F);
  // `skew` elements in: the kernel sees unaligned starts and tails.
  std::vector<float> p(n + skew);
  std::vector<float> m(n + skew);
  std::vector<float> v(n + skew);
  std::vector<float> vm(n + skew);
  std::vector<float> g32(n + skew);
  for (std::size_t i = 0; i < n + skew; ++i) {
    p[i] = dist(rng);
    m[i] = dist(rng) * 0.1F;
    v[i] = std::fabs(dist(rng)) * 0.01F;
    vm[i] = v[i] * (i % 3 == 0 ? 2.0F : 0.5F);
    g32[i] = dist(rng) * (i % 97 == 0 ? 1e4F : 1.0F);
  }
  std::vector<std::uint16_t> g16(n + skew);
  for (std::size_t i = 0; i < n + skew; ++i) {
    g16[i] = c.grad == dtype::bf16 ? ref_bf16(g32[i]) : ref_f16(g32[i]);
  }
  const void* g = c.grad == dtype::f32 ? static_cast<const void*>(g32.data() + skew)
                                       : static_cast<const void*>(g16.data() + skew);
  std::vector<float> rp(p.begin() + static_cast<std::ptrdiff_t>(skew), p.end());
  std::vector<float> rm(m.begin() + static_cast<std::ptrdiff_t>(skew), m.end());
  std::vector<float> rv(v.begin() + static_cast<std::ptrdiff_t>(skew), v.end());
  std::vector<float> rvm(vm.begin() + static_cast<std::ptrdiff_t>(skew), vm.end());
  std::vector<unsigned char> out((n + 1) * 4, 0xab);
  adam_tensors t;
  t.params = p.data() + skew;
  t.grads = g;
  t.grad_type = c.grad;
  t.exp_avg = m.data() + skew;
  t.exp_avg_sq = v.data() + skew;
  t.max_exp_avg_sq = c.o.amsgrad ? vm.data() + skew : nullptr;
  t.params_out = c.has_out ? out.data() + dtype_size(c.out) : nullptr;
  t.out_type = c.out;
  t.count = n;
  for (std::uint64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(adam_step_host(pool, t, c.o, step).ok());
    ref_adam(rp, g, c.grad, rm, rv, rvm, c.o, step);
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_LE(ulps(p[skew + i], rp[i]), 4)
        << "param " << i << ": " << p[skew + i] << " vs " << rp[i];
    ASSERT_LE(ulps(m[skew + i], rm[i]), 4) << "exp_avg " << i;
    ASSERT_LE(ulps(v[skew + i], rv[i]), 4) << "exp_avg_sq " << i;
    if (c.o.amsgrad) {
      ASSERT_LE(ulps(vm[skew + i], rvm[i]), 4) << "max_exp_avg_sq " << i;
    }
    if (c.has_out) {
      const unsigned char* o = out.data() + dtype_size(c.out) * (i + 1);
      if (c.out == dtype::f32) {
        float f = 0;
        std::memcpy(&f, o, 4);
        ASSERT_TRUE(same_float(f, p[skew + i])) << "params_out " << i;
      } else {
        std::uint16_t h = 0;
        std::memcpy(&h, o, 2);
        ASSERT_EQ(h, c.out == dtype::bf16 ? ref_bf16(p[skew + i]) : ref_f16(p[skew + i]))
            << "params_out " << i;
      }
    }
  }
  if (c.has_out) {
    // Nothing written before or after the output.
    for (std::size_t k = 0; k < dtype_size(c.out); ++k) ASSERT_EQ(out[k], 0xab);
    for (std::size_t k = (n + 1) * dtype_size(c.out); k < out.size(); ++k) ASSERT_EQ(out[k], 0xab);
  }
}

TEST(KernelAdam, MatchesTheScalarReferenceInEveryMode) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto pool = make_pool();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> sizes(1, 70000);
  int cases = 0;
  for (dtype grad : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (int out = 0; out < 4; ++out) {
      for (int mode = 0; mode < 4; ++mode) {
        adam_case c;
        c.grad = grad;
        c.has_out = out > 0;
        c.out = out == 2 ? dtype::bf16 : out == 3 ? dtype::f16 : dtype::f32;
        c.o.lr = 1e-3 * (1 + mode);
        c.o.weight_decay = mode == 0 ? 0.0 : 0.01 * mode;
        c.o.decoupled_weight_decay = mode == 2;
        c.o.amsgrad = mode == 3 || (out == 1 && mode == 1);
        c.o.maximize = mode == 1;
        const std::size_t n = cases % 5 == 0 ? cases % 17 + 1 : sizes(rng);
        SCOPED_TRACE("case " + std::to_string(cases) + ": n=" + std::to_string(n));
        check_adam_case(*pool, c, n, static_cast<std::size_t>(cases % 3), rng);
        ++cases;
      }
    }
  }
}

TEST(KernelAdam, SpecialValuesPropagateAsInTheReference) {
  auto pool = make_pool(1);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> g = {inf, -inf, nan, 0.0F, -0.0F, 1e-40F, 3e38F};
  const std::size_t n = g.size();
  std::vector<float> p(n, 1.0F);
  std::vector<float> m(n, 0.0F);
  std::vector<float> v(n, 0.0F);
  std::vector<float> none;
  std::vector<float> rp = p;
  std::vector<float> rm = m;
  std::vector<float> rv = v;
  adam_options o;
  o.weight_decay = 0.1;
  adam_tensors t{p.data(), g.data(), dtype::f32,  m.data(), v.data(),
                 nullptr,  nullptr,  dtype::bf16, n};
  ASSERT_TRUE(adam_step_host(*pool, t, o, 1).ok());
  ref_adam(rp, g.data(), dtype::f32, rm, rv, none, o, 1);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_float(p[i], rp[i]) || ulps(p[i], rp[i]) <= 4)
        << i << ": " << p[i] << " vs " << rp[i];
    EXPECT_TRUE(same_float(v[i], rv[i])) << i;
  }
}

TEST(KernelAdam, BadArgumentsAreRefusedAndNothingIsWritten) {
  auto pool = make_pool();
  std::vector<float> buf(64, 1.0F);
  std::vector<float> g(16, 0.5F);
  adam_tensors t{buf.data(), g.data(),    dtype::f32, buf.data() + 16, buf.data() + 32, nullptr,
                 nullptr,    dtype::bf16, 16};
  adam_options o;
  EXPECT_EQ(adam_step_host(*pool, t, o, 0).code(), errc::invalid_argument) << "step 0";
  o.amsgrad = true;
  EXPECT_EQ(adam_step_host(*pool, t, o, 1).code(), errc::invalid_argument) << "no amsgrad buffer";
  o.amsgrad = false;
  adam_tensors overlap = t;
  overlap.exp_avg = buf.data() + 8;
  EXPECT_EQ(adam_step_host(*pool, overlap, o, 1).code(), errc::invalid_argument);
  adam_tensors null_grad = t;
  null_grad.grads = nullptr;
  EXPECT_EQ(adam_step_host(*pool, null_grad, o, 1).code(), errc::invalid_argument);
  adam_tensors out_on_grads = t;
  out_on_grads.params_out = g.data();
  EXPECT_EQ(adam_step_host(*pool, out_on_grads, o, 1).code(), errc::invalid_argument);
  o.beta1 = 1.0;
  EXPECT_EQ(adam_step_host(*pool, t, o, 1).code(), errc::invalid_argument) << "beta1 = 1";
  for (float f : buf) ASSERT_EQ(f, 1.0F) << "a refused call wrote";
  // params_out == params as f32 is allowed (the same values).
  o = {};
  adam_tensors self = t;
  self.params_out = t.params;
  self.out_type = dtype::f32;
  EXPECT_TRUE(adam_step_host(*pool, self, o, 1).ok());
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
}  // namespace strata
