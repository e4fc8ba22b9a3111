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
      states(new std::atomic<object_state>[capacity]),
      requested_bytes(new std::atomic<std::uint32_t>[capacity]) {
  // Lowest addresses are handed out first.
  for (std::uint32_t i = 0; i < capacity; ++i) {
    free_stack[i] = capacity - 1 - i;
    states[i].store(object_state::free, std::memory_order_relaxed);
    requested_bytes[i].store(0, std::memory_order_relaxed);
  }
}

std::uint32_t slab::take(std::size_t bytes) noexcept {
  const std::uint32_t i = free_stack[--free_count];
  hand_out(i, bytes);
  return i;
}

}  // namespace strata
