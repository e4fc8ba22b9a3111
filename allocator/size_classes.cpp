#include "size_classes.hpp"

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

}  // namespace strata
