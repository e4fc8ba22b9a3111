#include "block_map.hpp"

#include <algorithm>
#include <bit>
#include <cassert>

namespace strata {

block_map::block_map(std::uintptr_t base, std::size_t size) : base_(base), size_(size) {
  auto it =
      blocks_.emplace(base, block_info{size, 0, block_state::free, false, nullptr, nullptr, false})
          .first;
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

block_map::iterator block_map::free_block_holding(std::uintptr_t addr, std::size_t bytes) {
  if (addr < base_ || addr - base_ >= size_ || bytes > size_ - (addr - base_)) return end();
  auto it = find_containing(addr);
  const block_info& b = it->second;
  if (b.state != block_state::free || addr + bytes > it->first + b.size) return end();
  return it;
}

block_map::iterator block_map::allocate_at(iterator it, std::uintptr_t addr, std::size_t bytes,
                                           std::size_t requested) {
  assert(it->second.state == block_state::free && it->first <= addr &&
         addr + bytes <= it->first + it->second.size);
  if (addr > it->first) {
    erase_free(it);
    block_info& head = it->second;
    auto rest = blocks_.emplace_hint(
        std::next(it), addr,
        block_info{it->first + head.size - addr, 0, block_state::free, head.mapped, nullptr});
    head.size = addr - it->first;
    insert_free(it);
    insert_free(rest);
    it = rest;
  }
  return allocate(it, bytes, requested);
}

void block_map::fence(iterator it) {
  it->second.fence = true;
  fences_.insert(it->first);
}

void block_map::fence_at(std::uintptr_t addr) {
  auto it = find_containing(addr);
  if (it->first != addr) {
    assert(it->second.state == block_state::free);
    erase_free(it);
    auto rest = blocks_.emplace_hint(std::next(it), addr,
                                     block_info{it->first + it->second.size - addr, 0,
                                                block_state::free, it->second.mapped, nullptr});
    it->second.size = addr - it->first;
    insert_free(it);
    insert_free(rest);
    it = rest;
  }
  fence(it);
}

void block_map::drop_fence(std::uintptr_t addr) {
  if (fences_.erase(addr) == 0) return;
  auto it = blocks_.find(addr);
  it->second.fence = false;
  if (it == blocks_.begin() || it->second.state != block_state::free) return;
  auto prev = std::prev(it);
  if (prev->second.state != block_state::free) return;
  erase_free(prev);
  erase_free(it);
  prev->second.size += it->second.size;
  prev->second.mapped = prev->second.mapped && it->second.mapped;
  blocks_.erase(it);
  insert_free(prev);
}

std::uintptr_t block_map::prev_fence(std::uintptr_t addr) const {
  auto f = fences_.upper_bound(addr);
  return f == fences_.begin() ? base_ : *std::prev(f);
}

std::uintptr_t block_map::next_fence(std::uintptr_t addr) const {
  auto f = fences_.upper_bound(addr);
  return f == fences_.end() ? base_ + size_ : *f;
}

block_map::iterator block_map::find_in_use(std::uintptr_t addr) {
  auto it = blocks_.find(addr);
  return it != blocks_.end() && it->second.in_use() ? it : blocks_.end();
}

void block_map::shadow(std::uintptr_t addr, std::size_t bytes) {
  const std::uintptr_t end = addr + bytes;
  auto it = std::prev(blocks_.upper_bound(addr));
  // The range is free, in one free block or several split by fences.
  while (it != blocks_.end() && it->first < end) {
    assert(it->second.state == block_state::free);
    erase_free(it);
    const bool mapped = it->second.mapped;
    if (it->first < addr) {
      const std::size_t head = addr - it->first;
      auto rest = blocks_.emplace_hint(
          std::next(it), addr,
          block_info{it->second.size - head, 0, block_state::free, mapped, nullptr});
      it->second.size = head;
      insert_free(it);
      it = rest;
    }
    if (it->first + it->second.size > end) {
      auto tail = blocks_.emplace_hint(
          std::next(it), end,
          block_info{it->first + it->second.size - end, 0, block_state::free, mapped, nullptr});
      insert_free(tail);
      it->second.size = end - it->first;
    }
    it->second.state = block_state::shadow;
    it->second.mapped = true;
    ++it;
  }
}

void block_map::unshadow(std::uintptr_t addr, std::size_t bytes) {
  const std::uintptr_t end = addr + bytes;
  auto it = std::prev(blocks_.upper_bound(addr));
  while (it != blocks_.end() && it->first < end) {
    assert(it->second.state == block_state::shadow);
    // Parts of the shadow block outside [addr, end) stay shadows.
    if (it->first < addr) {
      auto rest = blocks_.emplace_hint(
          std::next(it), addr,
          block_info{it->second.size - (addr - it->first), 0, block_state::shadow, true, nullptr});
      it->second.size = addr - it->first;
      it = rest;
    }
    if (it->first + it->second.size > end) {
      blocks_.emplace_hint(
          std::next(it), end,
          block_info{it->first + it->second.size - end, 0, block_state::shadow, true, nullptr});
      it->second.size = end - it->first;
    }
    it->second.mapped = true;
    it = std::next(release(it));  // the merged free block's successor is not free
  }
}

block_map::iterator block_map::release(iterator it) {
  assert(it->second.state != block_state::free);
  it->second.state = block_state::free;
  it->second.requested = 0;
  it->second.holder = nullptr;
  if (auto next = std::next(it);
      next != blocks_.end() && next->second.state == block_state::free && !next->second.fence) {
    erase_free(next);
    it->second.size += next->second.size;
    it->second.mapped = it->second.mapped && next->second.mapped;
    blocks_.erase(next);
  }
  if (it != blocks_.begin() && !it->second.fence) {
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
