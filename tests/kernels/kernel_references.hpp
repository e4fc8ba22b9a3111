// The host kernels' tests' references: plain scalar conversions to bf16
// and binary16 by their definitions, float comparisons, and PyTorch's
// single-tensor Adam one element at a time; the seed their randomized
// cases use (printed on failure) and a pool of host threads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "strata/kernels.hpp"

namespace strata::testing {

inline constexpr std::uint32_t seed = 20261123;

inline std::unique_ptr<kernel_pool> make_pool(unsigned threads = 3) {
  auto p = kernel_pool::create(threads);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  return std::move(*p);
}

// The nearest bf16 by comparing both neighbours in double; ties to even.
inline std::uint16_t ref_bf16(float f) {
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
inline std::uint16_t ref_f16(float f) {
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
inline float ref_from_f16(std::uint16_t h) {
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

inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Distance in units in the last place (same sign assumed near each other).
inline std::int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  const auto key = [](float x) {
    const auto i = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(x));
    return i < 0 ? std::int64_t{INT32_MIN} - i : i;
  };
  return std::llabs(key(a) - key(b));
}

inline float grad_value(const void* g, dtype t, std::size_t i) {
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
inline void ref_adam(std::vector<float>& p, const void* g, dtype gt, std::vector<float>& m,
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

}  // namespace strata::testing
