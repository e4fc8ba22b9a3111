#include "size_classes.hpp"

#include <algorithm>

namespace strata {

namespace {

// The slab size for objects of `size` bytes in units of `unit` bytes and
// pages of `page_bytes` (see the header for the rule).
std::size_t slab_bytes_for(std::size_t size, std::size_t unit, std::size_t page_bytes) {
  const std::size_t page = unit;  // the search below counts units
  const std::size_t want = std::max(unit, std::min(4 * size, page_bytes));
  const std::size_t first = (want + page - 1) / page;
  std::size_t best = first;
  std::size_t best_tail = first * page % size;
  for (std::size_t k = first; k < first + 8; ++k) {
    const std::size_t tail = k * page % size;
    if (tail * 16 <= k * page) return k * page;
    if (tail * best * page < best_tail * k * page) {  // tail / (k pages) is smaller
      best = k;
      best_tail = tail;
    }
  }
  return best * page;
}

}  // namespace

size_classes::size_classes(std::size_t slab_limit, std::size_t page_bytes) {
  slab_limit = std::min(slab_limit, max_slab_limit);
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
  const std::size_t unit = slab_unit(page_bytes);
  for (std::size_t c = 0; c < count_; ++c) {
    slab_bytes_[c] = slab_bytes_for(sizes_[c], unit, page_bytes);
  }
}

}  // namespace strata
