#include "extent_space.hpp"

namespace strata {

std::optional<std::uint64_t> extent_space::take(std::uint64_t bytes) {
  bytes = rounded(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t offset = it->first;
    const std::uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + bytes, rest);
    used_ += bytes;
    return offset;
  }
  if (limit_ != 0 && (end_ + bytes > limit_ || end_ + bytes < end_)) return std::nullopt;
  const std::uint64_t offset = end_;
  end_ += bytes;
  used_ += bytes;
  return offset;
}

void extent_space::give(std::uint64_t offset, std::uint64_t bytes) {
  bytes = rounded(bytes);
  used_ -= bytes;
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
