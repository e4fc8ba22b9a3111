#include "access_order.hpp"

#include <algorithm>
#include <limits>

namespace strata {

access_order::access_order(std::vector<access> order) : order_(std::move(order)) {
  prefix_.reserve(order_.size() + 1);
  prefix_.push_back(0);
  for (std::size_t i = 0; i < order_.size(); ++i) {
    prefix_.push_back(prefix_.back() + order_[i].bytes);
    positions_[order_[i].handle].push_back(i);
  }
}

const access& access_order::ahead(std::size_t i) const {
  return order_[(cursor_ + i) % order_.size()];
}

bool access_order::next_position(std::uint64_t handle, std::size_t from, std::size_t& at) const {
  auto it = positions_.find(handle);
  if (it == positions_.end()) return false;
  const std::vector<std::size_t>& p = it->second;
  auto next = std::lower_bound(p.begin(), p.end(), from);
  at = next != p.end() ? *next : p.front();
  return true;
}

access_order::followed access_order::follow(std::uint64_t handle) {
  const std::size_t expected = cursor_ % order_.size();
  const std::uint64_t wanted = order_[expected].handle;
  if (wanted == handle) {
    cursor_ = expected + 1;
    return {match::in_order, expected, wanted, expected};
  }
  std::size_t at = 0;
  if (!next_position(handle, expected, at)) return {match::unrecorded, expected, wanted, expected};
  cursor_ = at + 1;
  return {match::resynced, expected, wanted, at};
}

std::uint64_t access_order::next_use(std::uint64_t handle) const {
  const std::size_t from = cursor_ % order_.size();
  std::size_t at = 0;
  if (!next_position(handle, from, at)) return std::numeric_limits<std::uint64_t>::max();
  if (at >= from) return prefix_[at] - prefix_[from];
  return prefix_.back() - prefix_[from] + prefix_[at];
}

}  // namespace strata
