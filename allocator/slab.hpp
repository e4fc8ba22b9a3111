// A slab: whole slab units (64 KiB) of a small arena cut into objects of one size class.
//
// Host-side bookkeeping only (device memory is not host-visible on a GPU):
// a stack of free object indices, each object's state, and each live
// object's requested size.
// Cost: take and give are O(1) with no allocation; the arrays are sized once
// when the slab is made (slow path).
//
// Thread safety: the free stack, counts and list links are guarded by the
// allocator's mutex. An object's state and requested size are atomics, so
// the thread that owns the object through a thread cache may read and write
// them without the mutex; no two threads ever own one object at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata {

enum class object_state : std::uint8_t {
  free,     ///< on the slab's free stack
  live,     ///< handed to a caller
  pending,  ///< freed by the caller, waiting on events
  cached,   ///< freed into a thread cache, reusable on that cache's stream
};

struct slab {
  slab(std::uintptr_t base_addr, std::uint32_t cls, std::size_t object_bytes,
       std::size_t slab_bytes);

  [[nodiscard]] bool full() const noexcept { return free_count == 0; }
  [[nodiscard]] bool empty() const noexcept { return free_count == capacity; }
  /// Index of `p`, or -1 when `p` is not the start of an object.
  /// floor(off / object_size) as a 128-bit multiply: exact while
  /// off * object_size < 2^64, far beyond any slab.
  [[nodiscard]] std::int64_t index_of(std::uintptr_t p) const noexcept {
    __extension__ using u128 = unsigned __int128;
    const std::uintptr_t off = p - base;
    const auto i = static_cast<std::uint64_t>((static_cast<u128>(off) * reciprocal) >> 64);
    if (i >= capacity || i * object_size != off) return -1;
    return static_cast<std::int64_t>(i);
  }
  [[nodiscard]] std::uintptr_t address(std::uint32_t i) const noexcept {
    return base + static_cast<std::uintptr_t>(i) * object_size;
  }
  [[nodiscard]] object_state state(std::uint32_t i) const noexcept {
    return states[i].load(std::memory_order_relaxed);
  }
  void set_state(std::uint32_t i,
                 object_state s) noexcept {  // NOLINT(readability-make-member-function-const)
    states[i].store(s, std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t requested(std::uint32_t i) const noexcept {
    return requested_bytes[i].load(std::memory_order_relaxed);
  }
  /// Marks object i live for a request of `bytes`.
  void hand_out(std::uint32_t i, std::size_t bytes) noexcept {
    requested_bytes[i].store(static_cast<std::uint32_t>(bytes), std::memory_order_relaxed);
    set_state(i, object_state::live);
  }

  /// Pops a free object and hands it out; returns its index.
  std::uint32_t take(std::size_t bytes) noexcept;
  /// Puts object i back on the free stack.
  void give(std::uint32_t i) noexcept {
    set_state(i, object_state::free);
    free_stack[free_count++] = i;
  }

  std::uintptr_t base;
  std::size_t object_size;
  std::uint64_t reciprocal;  // ceil(2^64 / object_size): index_of without a divide
  std::uint32_t size_class;
  std::uint32_t capacity;
  std::uint32_t free_count;
  std::unique_ptr<std::uint32_t[]> free_stack;
  std::unique_ptr<std::atomic<object_state>[]> states;
  std::unique_ptr<std::atomic<std::uint32_t>[]> requested_bytes;
  slab* prev = nullptr;  // in its class's list of slabs with free objects
  slab* next = nullptr;
  bool listed = false;
  slab* older = nullptr;  // in its stream's list of every slab, which owns them
  slab* newer = nullptr;
};

}  // namespace strata
