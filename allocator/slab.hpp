// A slab: one page of a small arena cut into objects of one size class.
//
// Host-side bookkeeping only (device memory is not host-visible on a GPU):
// a stack of free object indices, a bit per object that is live (handed to a
// caller), and each live object's requested size.
// Cost: take and give are O(1) with no allocation; the arrays are sized once
// when the slab is made (slow path).
//
// Thread safety: none; the allocator serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata {

struct slab {
  slab(std::uintptr_t base, std::uint32_t size_class, std::size_t object_size,
       std::size_t slab_bytes);

  [[nodiscard]] bool full() const noexcept { return free_count == 0; }
  [[nodiscard]] bool empty() const noexcept { return free_count == capacity; }
  /// Index of `p`, or -1 when `p` is not the start of an object.
  [[nodiscard]] std::int64_t index_of(std::uintptr_t p) const noexcept;
  [[nodiscard]] bool live(std::uint32_t i) const noexcept {
    return ((live_bits[i / 64] >> (i % 64)) & 1U) != 0;
  }

  /// Pops a free object, marks it live with `requested` bytes; returns its address.
  std::uintptr_t take(std::size_t requested) noexcept;
  /// Clears the live bit of object i (freed by the caller, maybe pending).
  void retire(std::uint32_t i) noexcept { live_bits[i / 64] &= ~(std::uint64_t{1} << (i % 64)); }
  /// Puts object i back on the free stack.
  void give(std::uint32_t i) noexcept { free_stack[free_count++] = i; }

  std::uintptr_t base;
  std::size_t object_size;
  std::uint64_t reciprocal;  // ceil(2^64 / object_size): index_of without a divide
  std::uint32_t size_class;
  std::uint32_t capacity;
  std::uint32_t free_count;
  std::unique_ptr<std::uint32_t[]> free_stack;
  std::unique_ptr<std::uint64_t[]> live_bits;
  std::unique_ptr<std::uint32_t[]> requested;
  slab* prev = nullptr;  // in its class's list of slabs with free objects
  slab* next = nullptr;
  bool listed = false;
};

}  // namespace strata
