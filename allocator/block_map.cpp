#include "block_map.hpp"

#include <algorithm>
#include <bit>
#include <cassert>

namespace strata {

block_map::block_map(std::uintptr_t base, std::size_t size) : base_(base), size_(size) {
  auto it = blocks_.emplace(base, block_info{size, 0, block_state::free, false, nullptr}).first;
  insert_free(it);
}

unsigned block_map::bucket_of(std::size_t bytes) noexcept {
  return static_cast<unsigned>(std::bit_width(bytes | 1)) - 1;
}

void block_map::insert_free(iterator it) {
  const unsigned b = bucket_of(it->second.size);
  free_[b].emplace(it->first, it->second.size);
  nonempty_ |= std::uint64_t{1} << b;
  if (it->second.mapped) ++mapped_free_;
}

void block_map::erase_free(iterator it) {
  const unsigned b = bucket_of(it->second.size);
  free_[b].erase(it->first);
  if (free_[b].empty()) nonempty_ &= ~(std::uint64_t{1} << b);
  if (it->second.mapped) --mapped_free_;
}

void block_map::set_mapped(iterator it, bool mapped) {
  assert(it->second.state == block_state::free);
  if (it->second.mapped == mapped) return;
  it->second.mapped = mapped;
  if (mapped) {
    ++mapped_free_;
  } else {
    --mapped_free_;
  }
}

block_map::iterator block_map::first_fit(std::size_t bytes) {
  if (bytes == 0) return blocks_.end();
  const unsigned own = bucket_of(bytes);
  std::uintptr_t best = UINTPTR_MAX;
  // Every block of a larger bucket fits: the lowest first address wins.
  const std::uint64_t larger = own + 1 < buckets ? ~((std::uint64_t{2} << own) - 1) : 0;
  for (std::uint64_t m = nonempty_ & larger; m != 0; m &= m - 1) {
    best = std::min(best, free_[static_cast<unsigned>(std::countr_zero(m))].begin()->first);
  }
  // The request's own bucket: the first block below `best` that is large enough.
  for (const auto& [addr, size] : free_[own]) {
    if (addr >= best) break;
    if (size >= bytes) {
      best = addr;
      break;
    }
  }
  return best == UINTPTR_MAX ? blocks_.end() : blocks_.find(best);
}

block_map::iterator block_map::allocate(iterator it, std::size_t bytes, std::size_t requested) {
  assert(it->second.state == block_state::free && it->second.size >= bytes);
  erase_free(it);
  block_info& b = it->second;
  if (b.size > bytes) {
    auto rest =
        blocks_.emplace_hint(std::next(it), it->first + bytes,
                             block_info{b.size - bytes, 0, block_state::free, b.mapped, nullptr});
    insert_free(rest);
  }
  b.size = bytes;
  b.requested = requested;
  b.state = block_state::allocated;
  b.mapped = true;
  b.holder = nullptr;
  return it;
}

block_map::iterator block_map::find_in_use(std::uintptr_t addr) {
  auto it = blocks_.find(addr);
  if (it == blocks_.end() || it->second.state == block_state::free) return blocks_.end();
  return it;
}

block_map::iterator block_map::release(iterator it) {
  assert(it->second.state != block_state::free);
  it->second.state = block_state::free;
  it->second.requested = 0;
  it->second.holder = nullptr;
  if (auto next = std::next(it); next != blocks_.end() && next->second.state == block_state::free) {
    erase_free(next);
    it->second.size += next->second.size;
    it->second.mapped = it->second.mapped && next->second.mapped;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    if (auto prev = std::prev(it); prev->second.state == block_state::free) {
      erase_free(prev);
      prev->second.size += it->second.size;
      prev->second.mapped = prev->second.mapped && it->second.mapped;
      blocks_.erase(it);
      it = prev;
    }
  }
  insert_free(it);
  return it;
}

}  // namespace strata
