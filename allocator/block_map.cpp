#include "block_map.hpp"

#include <algorithm>
#include <cassert>

namespace strata {

block_map::block_map(std::uintptr_t base, std::size_t size) : base_(base), size_(size) {
  auto it = blocks_.emplace(base, block_info{size, 0, block_state::free, false, nullptr}).first;
  insert_free(it);
}

void block_map::insert_free(iterator it) {
  free_by_size_.emplace(it->second.size, it->first);
  if (it->second.mapped) ++mapped_free_;
}

void block_map::erase_free(iterator it) {
  free_by_size_.erase({it->second.size, it->first});
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

block_map::iterator block_map::best_fit(std::size_t bytes) {
  auto f = free_by_size_.lower_bound({bytes, 0});
  if (f == free_by_size_.end()) return blocks_.end();
  return blocks_.find(f->second);
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
