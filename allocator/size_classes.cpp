#include "size_classes.hpp"

#include <bit>

namespace strata {

size_classes::size_classes(std::size_t slab_limit) {
  for (std::size_t s = 512; s <= 2048 && s <= slab_limit; s += 512) sizes_[count_++] = s;
  for (std::size_t base = 2048; count_ < max_classes; base *= 2) {
    bool done = false;
    for (std::size_t q = 1; q <= 4; ++q) {
      const std::size_t s = base + q * base / 4;
      if (s > slab_limit) {
        done = true;
        break;
      }
      sizes_[count_++] = s;
    }
    if (done) break;
  }
  limit_ = count_ > 0 ? sizes_[count_ - 1] : 0;
}

std::uint32_t size_classes::class_of(std::size_t bytes) const noexcept {
  if (bytes <= 2048) return static_cast<std::uint32_t>((bytes - 1) / 512);
  // Four classes per power of two above 2 KiB: find the power, then the quarter.
  const std::size_t base = std::bit_floor(bytes - 1);
  const auto quarter = static_cast<std::uint32_t>((bytes - 1 - base) / (base / 4));
  const auto doublings = static_cast<std::uint32_t>(std::countr_zero(base) - 11);
  return 4 + doublings * 4 + quarter;
}

}  // namespace strata
