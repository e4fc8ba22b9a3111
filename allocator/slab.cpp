#include "slab.hpp"

namespace strata {

slab::slab(std::uintptr_t base_addr, std::uint32_t cls, std::size_t object_bytes,
           std::size_t slab_bytes)
    : base(base_addr),
      object_size(object_bytes),
      reciprocal(~std::uint64_t{0} / object_bytes + 1),
      size_class(cls),
      capacity(static_cast<std::uint32_t>(slab_bytes / object_bytes)),
      free_count(capacity),
      free_stack(new std::uint32_t[capacity]),
      live_bits(new std::uint64_t[(capacity + 63) / 64]()),
      requested(new std::uint32_t[capacity]()) {
  // Lowest addresses are handed out first.
  for (std::uint32_t i = 0; i < capacity; ++i) free_stack[i] = capacity - 1 - i;
}

std::int64_t slab::index_of(std::uintptr_t p) const noexcept {
  // floor(off / object_size) as a 128-bit multiply: exact while
  // off * object_size < 2^64, far beyond any slab.
  __extension__ using u128 = unsigned __int128;
  const std::uintptr_t off = p - base;
  const auto i = static_cast<std::uint64_t>((static_cast<u128>(off) * reciprocal) >> 64);
  if (i >= capacity || i * object_size != off) return -1;
  return static_cast<std::int64_t>(i);
}

std::uintptr_t slab::take(std::size_t bytes) noexcept {
  const std::uint32_t i = free_stack[--free_count];
  live_bits[i / 64] |= std::uint64_t{1} << (i % 64);
  requested[i] = static_cast<std::uint32_t>(bytes);
  return base + static_cast<std::uintptr_t>(i) * object_size;
}

}  // namespace strata
