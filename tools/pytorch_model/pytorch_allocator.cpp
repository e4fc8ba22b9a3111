#include "pytorch_model/pytorch_allocator.hpp"

#include <algorithm>

namespace strata {

namespace {

constexpr std::uint32_t none = UINT32_MAX;
constexpr std::uint64_t mib = 1ULL << 20;
constexpr std::uint64_t min_block = 512;
constexpr std::uint64_t small_size = mib;  // the small pool's largest request
constexpr std::uint64_t small_buffer = 2 * mib;
constexpr std::uint64_t large_buffer = 20 * mib;
constexpr std::uint64_t min_large_alloc = 10 * mib;
constexpr std::uint64_t round_large = 2 * mib;

std::uint64_t round_up(std::uint64_t n, std::uint64_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

std::uint32_t pytorch_allocator_model::new_block(const block& b) {
  if (!spare_.empty()) {
    const std::uint32_t id = spare_.back();
    spare_.pop_back();
    blocks_[id] = b;
    return id;
  }
  blocks_.push_back(b);
  return static_cast<std::uint32_t>(blocks_.size() - 1);
}

void pytorch_allocator_model::insert_free(std::uint32_t id) {
  const block& b = blocks_[id];
  free_[b.small ? 1 : 0].insert({b.size, b.segment, b.offset, id});
}

void pytorch_allocator_model::erase_free(std::uint32_t id) {
  const block& b = blocks_[id];
  free_[b.small ? 1 : 0].erase({b.size, b.segment, b.offset, id});
}

std::uint32_t pytorch_allocator_model::grow(std::uint64_t size, bool small) {
  const auto pool = static_cast<std::size_t>(small ? 1 : 0);
  std::uint64_t added = 0;
  std::uint32_t id = none;
  if (mode_ == mode::native) {
    added = small ? small_buffer
                  : (size < min_large_alloc ? large_buffer : round_up(size, round_large));
    id = new_block({segments_++, 0, added, true, small, none, none});
    growths_.push_back({added, 0});
  } else {
    // The pool's one segment grows at its end in pages; a free block
    // there takes the new pages in.
    const std::uint64_t page = small ? small_buffer : large_buffer;
    const std::uint32_t tail = tail_[pool];
    if (tail != none && blocks_[tail].free) {
      added = round_up(size - blocks_[tail].size, page);
      erase_free(tail);
      blocks_[tail].size += added;
      id = tail;
    } else {
      added = round_up(size, page);
      id = new_block({pool == 1 ? 1U : 0U, mapped_[pool], added, true, small, tail, none});
      if (tail != none) blocks_[tail].next = id;
      tail_[pool] = id;
    }
    mapped_[pool] += added;
    growths_.push_back({added, page});
  }
  reserved_ += added;
  peak_ = std::max(peak_, reserved_);
  return id;
}

std::uint32_t pytorch_allocator_model::allocate(std::uint64_t bytes) {
  const std::uint64_t size = std::max(min_block, round_up(bytes, min_block));
  const bool small = size <= small_size;
  auto& pool = free_[small ? 1 : 0];
  std::uint32_t id = none;
  if (auto it = pool.lower_bound({size, 0, 0, 0}); it != pool.end()) {  // best fit
    id = std::get<3>(*it);
    pool.erase(it);
  } else {
    id = grow(size, small);
  }
  const std::uint64_t rest = blocks_[id].size - size;
  if (small ? rest >= min_block : rest > small_size) {
    block& b = blocks_[id];
    const std::uint32_t after = b.next;
    const std::uint32_t split =
        new_block({b.segment, b.offset + size, rest, true, small, id, after});
    blocks_[id].size = size;
    blocks_[id].next = split;
    if (after != none) blocks_[after].prev = split;
    if (mode_ == mode::expandable && tail_[small ? 1 : 0] == id) tail_[small ? 1 : 0] = split;
    insert_free(split);
  }
  blocks_[id].free = false;
  return id;
}

void pytorch_allocator_model::free(std::uint32_t handle) {
  std::uint32_t id = handle;
  blocks_[id].free = true;
  const auto pool = static_cast<std::size_t>(blocks_[id].small ? 1 : 0);
  // Merges `later` into `earlier`, its free neighbour before it.
  const auto merge = [&](std::uint32_t earlier, std::uint32_t later) {
    block& e = blocks_[earlier];
    const block& l = blocks_[later];
    e.size += l.size;
    e.next = l.next;
    if (l.next != none) blocks_[l.next].prev = earlier;
    if (tail_[pool] == later) tail_[pool] = earlier;
    spare_.push_back(later);
  };
  if (const std::uint32_t n = blocks_[id].next; n != none && blocks_[n].free) {
    erase_free(n);
    merge(id, n);
  }
  if (const std::uint32_t p = blocks_[id].prev; p != none && blocks_[p].free) {
    erase_free(p);
    merge(p, id);
    id = p;
  }
  insert_free(id);
}

}  // namespace strata
