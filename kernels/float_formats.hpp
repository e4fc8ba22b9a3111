// bfloat16 and IEEE binary16 <-> binary32, bit for bit, in plain integer and
// float operations the compiler can vectorize (no table, no libcall).
//
// To narrower: round to nearest, ties to even; a NaN stays a NaN (quiet,
// sign kept); finite values past the largest finite round to infinity, as
// the hardware's conversions do; fp16 subnormals are produced exactly (this
// needs round-to-nearest and no flush-to-zero, the defaults). To binary32:
// exact.
//
// Cost: a handful of integer operations per element; branches are selects.
// Compiled by the host compiler and by nvcc (cuda_kernels.cu), identically.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::kernels {

STRATA_HOST_DEVICE inline std::uint32_t bits_of(float f) noexcept {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

STRATA_HOST_DEVICE inline float float_of(std::uint32_t u) noexcept {
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

STRATA_HOST_DEVICE inline float bf16_to_f32(std::uint16_t h) noexcept {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

STRATA_HOST_DEVICE inline std::uint16_t f32_to_bf16(float f) noexcept {
  const std::uint32_t u = bits_of(f);
  const bool nan = (u & 0x7fffffffU) > 0x7f800000U;
  // Adding 0x7fff plus the kept lowest bit rounds to nearest even; a carry
  // out of the mantissa bumps the exponent, up to infinity.
  const std::uint32_t rounded = (u + 0x7fffU + ((u >> 16) & 1U)) >> 16;
  return static_cast<std::uint16_t>(nan ? ((u >> 16) | 0x40U) : rounded);
}

// Every path is computed and one selected, so the loops over these vectorize.
STRATA_HOST_DEVICE inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t bits = static_cast<std::uint32_t>(h & 0x7fffU) << 13;  // exponent, mantissa
  const std::uint32_t exponent = bits & (0x7c00U << 13);
  const std::uint32_t normal = bits + ((127U - 15U) << 23);  // rebiased
  // Infinity or NaN: all exponent bits.
  const std::uint32_t special = normal + ((128U - 16U) << 23);
  // Zero or subnormal: the FPU normalizes m * 2^-24 exactly.
  const std::uint32_t subnormal =
      bits_of(float_of(normal + (1U << 23)) - float_of(113U << 23));
  const std::uint32_t out =
      exponent == (0x7c00U << 13) ? special : (exponent == 0 ? subnormal : normal);
  return float_of(out | sign);
}

STRATA_HOST_DEVICE inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t all = bits_of(f);
  const std::uint32_t sign = (all >> 16) & 0x8000U;
  const std::uint32_t u = all & 0x7fffffffU;
  // 2^16 or more (or Inf/NaN): infinity, or a quiet NaN.
  const std::uint32_t special = u > 0x7f800000U ? 0x7e00U : 0x7c00U;
  // Below 2^-14: a subnormal or zero. Adding 0.5 puts the 10 mantissa bits
  // at the bottom, rounded to nearest even by the FPU.
  constexpr std::uint32_t magic = ((127U - 15U) + (23U - 10U) + 1U) << 23;
  const std::uint32_t subnormal = bits_of(float_of(u) + float_of(magic)) - magic;
  // Normal: rebias, round to nearest even (0xfff plus the kept lowest bit);
  // a carry past 65504 becomes infinity.
  const std::uint32_t normal = (u + ((15U - 127U) << 23) + 0xfffU + ((u >> 13) & 1U)) >> 13;
  const std::uint32_t out =
      u >= ((127U + 16U) << 23) ? special : (u < (113U << 23) ? subnormal : normal);
  return static_cast<std::uint16_t>(out | sign);
}

}  // namespace strata::kernels
