// Argument checks shared by the host kernels and their stream-ordered
// forms, so both refuse the same calls with the same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel_arguments.hpp"
#include "strata/kernels.hpp"

namespace strata::kernels {

inline status invalid(const char* kernel, const std::string& why) {
  return {errc::invalid_argument, std::string(kernel) + ": " + why};
}

// True if [a, a+abytes) and [b, b+bbytes) share a byte.
inline bool overlaps(const void* a, std::size_t abytes, const void* b,
                     std::size_t bbytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return abytes != 0 && bbytes != 0 && x < y + bbytes && y < x + abytes;
}

// Elements of `count` that fit in memory as `t` (no overflow of bytes).
inline bool count_fits(std::size_t count, dtype t) noexcept {
  return count <= SIZE_MAX / dtype_size(t);
}

status check_adam(const adam_tensors& t, const adam_options& o, std::uint64_t step);
// The Adam step's arguments, its scalars computed in double and rounded once.
adam_args adam_args_of(const adam_tensors& t, const adam_options& o, std::uint64_t step);
status check_cast(void* dst, dtype to, const void* src, dtype from, std::size_t count);
// `kernel` is "pack" or "unpack": unpack writes the tensors, so they must
// not overlap each other either.
status check_pack(const char* kernel, const pack_entry* entries, std::size_t n, const void* flat,
                  std::size_t flat_bytes);
// y and x (y itself for scale) of `count` floats: not null, the same or
// disjoint.
status check_axpy(const char* kernel, float* y, const float* x, std::size_t count);
// The pack arguments of entries [0, n), n <= pack_batch.
pack_args pack_batch_of(const pack_entry* entries, std::size_t n, void* flat, bool unpack);

}  // namespace strata::kernels
