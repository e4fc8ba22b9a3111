#include "strata/extent_space.hpp"

namespace strata {

std::optional<std::uint64_t> extent_space::take(std::uint64_t bytes, std::uint64_t start_align) {
  if (bytes > UINT64_MAX - align_) return std::nullopt;  // would wrap when rounded
  bytes = rounded(bytes);
  const std::uint64_t a = start_align > align_ ? start_align : align_;
  const auto up = [a](std::uint64_t x) { return (x + a - 1) / a * a; };
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uint64_t offset = it->first;
    const std::uint64_t length = it->second;
    const std::uint64_t start = up(offset);
    if (start - offset > length || length - (start - offset) < bytes) continue;
    const std::uint64_t rest = length - (start - offset) - bytes;
    free_.erase(it);
    if (start > offset) free_.emplace(offset, start - offset);
    if (rest > 0) free_.emplace(start + bytes, rest);
    used_ += bytes;
    return start;
  }
  const std::uint64_t start = up(end_);
  if (start + bytes < end_ || (limit_ != 0 && start + bytes > limit_)) return std::nullopt;
  if (start > end_) add_free(end_, start - end_);
  end_ = start + bytes;
  used_ += bytes;
  return start;
}

void extent_space::give(std::uint64_t offset, std::uint64_t bytes) {
  bytes = rounded(bytes);
  used_ -= bytes;
  add_free(offset, bytes);
}

void extent_space::add_free(std::uint64_t offset, std::uint64_t bytes) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

}  // namespace strata
