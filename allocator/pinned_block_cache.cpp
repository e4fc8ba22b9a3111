#include "pinned_block_cache.hpp"

namespace strata {

pinned_block_cache::~pinned_block_cache() {
  for (const auto& [ptr, bytes] : live_) (void)dev_.host_free(const_cast<void*>(ptr));
  for (const auto& [age, b] : kept_) (void)dev_.host_free(b.ptr);
}

void* pinned_block_cache::take(std::size_t bytes, std::uint64_t room, std::uint64_t within) {
  const std::size_t need = rounded(bytes);
  if (auto it = by_size_.lower_bound(need); it != by_size_.end() && it->first <= need + need / 16) {
    const auto age = it->second;
    const kept_buffer b = kept_.at(age);
    by_size_.erase(it);
    kept_.erase(age);
    kept_bytes_ -= b.bytes;
    live_bytes_ += b.bytes;
    live_.emplace(b.ptr, b.bytes);
    return b.ptr;
  }
  const auto grow = [](std::uint64_t& r, std::uint64_t by) {  // saturating: no cap is UINT64_MAX
    r = r > UINT64_MAX - by ? UINT64_MAX : r + by;
  };
  while ((need > room || need > within) && !kept_.empty()) {
    grow(room, kept_.begin()->second.bytes);
    grow(within, kept_.begin()->second.bytes);
    release_oldest();
  }
  if (need > room) return nullptr;
  auto p = dev_.host_alloc(need);
  if (!p && !kept_.empty()) {
    trim(0);
    p = dev_.host_alloc(need);
  }
  if (!p) return nullptr;
  ++allocations_;
  live_.emplace(*p, need);
  live_bytes_ += need;
  return *p;
}

std::size_t pinned_block_cache::live_size(const void* p) const {
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second;
}

void pinned_block_cache::give(void* p) {
  auto it = live_.find(p);
  if (it == live_.end()) return;
  const std::size_t bytes = it->second;
  live_.erase(it);
  live_bytes_ -= bytes;
  const std::uint64_t age = clock_++;
  kept_.emplace(age, kept_buffer{p, bytes});
  by_size_.emplace(bytes, age);
  kept_bytes_ += bytes;
}

void pinned_block_cache::trim(std::uint64_t keep) {
  while (kept_bytes_ > keep) release_oldest();
}

void pinned_block_cache::release_oldest() {
  auto oldest = kept_.begin();
  const kept_buffer b = oldest->second;
  for (auto [it, end] = by_size_.equal_range(b.bytes); it != end; ++it) {
    if (it->second == oldest->first) {
      by_size_.erase(it);
      break;
    }
  }
  kept_.erase(oldest);
  kept_bytes_ -= b.bytes;
  ++releases_;
  (void)dev_.host_free(b.ptr);
}

}  // namespace strata
