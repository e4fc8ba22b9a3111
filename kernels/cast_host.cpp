// Cast-copy between fp32, bf16 and fp16 on the host (float_formats.hpp has
// the rounding). Same-type casts are copies. Cost: one pass, a few integer
// operations per element; memory bound.
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "argument_checks.hpp"
#include "float_formats.hpp"
#include "host_runners.hpp"
#include "strata/kernels.hpp"

namespace strata {

namespace kernels {

namespace {

// fp32 -> bf16 over [begin, end): f32_to_bf16 on every element. With SSE2
// (every x86-64), four at a time: the rounded value shifted arithmetically
// keeps its top half in int16 range, so one signed pack narrows it exactly
// (the compiler's own narrowing takes several shuffles).
void f32_to_bf16_run(const float* __restrict in, std::uint16_t* __restrict out, std::size_t begin,
                     std::size_t end) {
  std::size_t i = begin;
#if defined(__SSE2__)
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i inf = _mm_set1_epi32(0x7f800000);
  const __m128i bias = _mm_set1_epi32(0x7fff);
  const __m128i one = _mm_set1_epi32(1);
  const __m128i quiet = _mm_set1_epi32(0x40);
  for (; i + 8 <= end; i += 8) {
    __m128i halves[2];
    for (std::size_t h = 0; h < 2; ++h) {
      const __m128i u =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + std::size_t{4} * h));
      const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, abs_mask), inf);
      const __m128i odd = _mm_and_si128(_mm_srli_epi32(u, 16), one);
      const __m128i rounded = _mm_srai_epi32(_mm_add_epi32(u, _mm_add_epi32(bias, odd)), 16);
      const __m128i quieted = _mm_srai_epi32(_mm_or_si128(u, _mm_slli_epi32(quiet, 16)), 16);
      halves[h] = _mm_or_si128(_mm_and_si128(nan, quieted), _mm_andnot_si128(nan, rounded));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi32(halves[0], halves[1]));
  }
#endif
  for (; i < end; ++i) out[i] = f32_to_bf16(in[i]);
}

template <dtype From, dtype To>
void cast_part(void* context, std::size_t begin, std::size_t end) {
  const auto& job = *static_cast<const cast_args*>(context);
  if constexpr (From == To) {
    const std::size_t size = dtype_size(From);
    std::memcpy(static_cast<unsigned char*>(job.dst) + begin * size,
                static_cast<const unsigned char*>(job.src) + begin * size, (end - begin) * size);
  } else if constexpr (From == dtype::f32 && To == dtype::bf16) {
    f32_to_bf16_run(static_cast<const float*>(job.src), static_cast<std::uint16_t*>(job.dst), begin,
                    end);
  } else if constexpr (From == dtype::f32) {
    const auto* __restrict in = static_cast<const float*>(job.src);
    auto* __restrict out = static_cast<std::uint16_t*>(job.dst);
    for (std::size_t i = begin; i < end; ++i) {
      out[i] = f32_to_f16(in[i]);
    }
  } else if constexpr (To == dtype::f32) {
    const auto* __restrict in = static_cast<const std::uint16_t*>(job.src);
    auto* __restrict out = static_cast<float*>(job.dst);
    for (std::size_t i = begin; i < end; ++i) {
      out[i] = From == dtype::bf16 ? bf16_to_f32(in[i]) : f16_to_f32(in[i]);
    }
  } else {
    // bf16 <-> fp16: through fp32, which holds both exactly.
    const auto* __restrict in = static_cast<const std::uint16_t*>(job.src);
    auto* __restrict out = static_cast<std::uint16_t*>(job.dst);
    for (std::size_t i = begin; i < end; ++i) {
      out[i] = To == dtype::bf16 ? f32_to_bf16(f16_to_f32(in[i])) : f32_to_f16(bf16_to_f32(in[i]));
    }
  }
}

template <dtype From>
kernel_pool::range_fn pick_to(dtype to) {
  switch (to) {
    case dtype::f32:
      return &cast_part<From, dtype::f32>;
    case dtype::bf16:
      return &cast_part<From, dtype::bf16>;
    case dtype::f16:
      return &cast_part<From, dtype::f16>;
  }
  return nullptr;
}

kernel_pool::range_fn pick_cast(dtype from, dtype to) {
  switch (from) {
    case dtype::f32:
      return pick_to<dtype::f32>(to);
    case dtype::bf16:
      return pick_to<dtype::bf16>(to);
    case dtype::f16:
      return pick_to<dtype::f16>(to);
  }
  return nullptr;
}

}  // namespace

void run_cast(kernel_pool& pool, const cast_args& a) {
  cast_args copy = a;
  pool.parallel_for(a.count, std::size_t{32} << 10,
                    pick_cast(static_cast<dtype>(a.from), static_cast<dtype>(a.to)), &copy);
}

status check_cast(void* dst, dtype to, const void* src, dtype from, std::size_t count) {
  const char* k = "cast_copy";
  if (count == 0) return {};
  if (pick_cast(from, to) == nullptr) return invalid(k, "unknown dtype");
  if (!count_fits(count, dtype::f32)) return invalid(k, "count too large");
  if (dst == nullptr || src == nullptr) return invalid(k, "null buffer");
  if (reinterpret_cast<std::uintptr_t>(dst) % dtype_size(to) != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % dtype_size(from) != 0) {
    return invalid(k, "dst and src must be aligned to their element size");
  }
  const bool same = dst == src && from == to;
  if (!same && overlaps(dst, count * dtype_size(to), src, count * dtype_size(from))) {
    return invalid(k, "dst and src overlap");
  }
  return {};
}

}  // namespace kernels

status cast_copy_host(kernel_pool& pool, void* dst, dtype to, const void* src, dtype from,
                      std::size_t count) {
  if (auto s = kernels::check_cast(dst, to, src, from, count); !s) return s;
  if (count == 0 || (dst == src && from == to)) return {};
  kernels::run_cast(pool, {dst, src, count, static_cast<int>(to), static_cast<int>(from)});
  return {};
}

}  // namespace strata
