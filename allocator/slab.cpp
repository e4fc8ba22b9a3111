#include "slab.hpp"

namespace strata {

slab::slab(std::uintptr_t base_addr, std::uint32_t cls, std::size_t object_bytes,
           std::size_t slab_bytes)
    : base(base_addr),
      object_size(object_bytes),
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
  const std::uintptr_t off = p - base;
  if (off % object_size != 0 || off / object_size >= capacity) return -1;
  return static_cast<std::int64_t>(off / object_size);
}

std::uintptr_t slab::take(std::size_t bytes) noexcept {
  const std::uint32_t i = free_stack[--free_count];
  live_bits[i / 64] |= std::uint64_t{1} << (i % 64);
  requested[i] = static_cast<std::uint32_t>(bytes);
  return base + static_cast<std::uintptr_t>(i) * object_size;
}

}  // namespace strata
