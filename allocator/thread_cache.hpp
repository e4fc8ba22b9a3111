// Per-thread caches of small objects: the lock-free fast path.
//
// A thread cache is bound to one (allocator, stream) at a time. A small
// object freed on that stream by this thread is parked in the cache (state
// `cached`) instead of returning to its slab; the next request of the same
// class on that stream takes it back. Both directions touch only this
// thread's memory and the object's own atomic state: no lock, no system
// call, no heap allocation. Everything else takes the allocator's mutex.
//
// Accounting: parked objects stay counted as allocated in the allocator's
// shared counters; the cache counts what went in and out, and stats() nets
// the two, so current values are exact. Peaks are updated on the locked path
// and may exceed the true peak by the bytes parked in caches, at most
// `max_bytes` per thread.
//
// Lifetime: a cache outlives allocators (it checks a registry of live ones
// before touching its owner) and flushes itself into its owner when the
// thread exits or the cache is re-bound.
//
// Thread safety: bins and binding are touched only by the owning thread
// (flushes run on that thread, under the owner's mutex). The counters are
// atomics that the owner writes and stats() reads under the owner's mutex.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "size_classes.hpp"

namespace strata {

class caching_allocator;
class stream_arena;
struct slab;

class thread_cache {
 public:
  static constexpr std::uint32_t bin_capacity = 16;
  static constexpr std::size_t max_bytes = std::size_t{1} << 20;

  struct entry {
    std::uintptr_t addr;
    slab* s;
    std::uint32_t index;
  };
  enum counter : std::uint8_t { allocs, frees, alloc_bytes, free_bytes, alloc_req, free_req };

  /// The calling thread's cache. Fast path: one TLS load and a branch.
  static thread_cache& current() {
    thread_cache* tc = current_;
    return tc != nullptr ? *tc : create_for_thread();
  }
  thread_cache() = default;
  thread_cache(const thread_cache&) = delete;
  thread_cache& operator=(const thread_cache&) = delete;
  thread_cache(thread_cache&&) = delete;
  thread_cache& operator=(thread_cache&&) = delete;
  /// Flushes into the owner if it is still alive.
  ~thread_cache();

  [[nodiscard]] bool bound_to(const caching_allocator* a, std::uint64_t serial,
                              void* stream) const noexcept {
    return owner_ == a && serial_ == serial && stream_ == stream;
  }
  [[nodiscard]] bool owned_by(const caching_allocator* a, std::uint64_t serial) const noexcept {
    return owner_ == a && serial_ == serial;
  }
  [[nodiscard]] void* stream() const noexcept { return stream_; }
  [[nodiscard]] bool empty() const noexcept { return parked_bytes_ == 0; }
  [[nodiscard]] stream_arena* arena() const noexcept { return arena_; }

  /// Takes a parked object of class `cls`, or returns false.
  bool pop(std::uint32_t cls, entry& out) noexcept {
    bin& b = bins_[cls];
    if (b.count == 0) return false;
    out = b.items[--b.count];
    return true;
  }
  /// Parks an object of class `cls` and `bytes`; false when the cache is full.
  bool push(std::uint32_t cls, const entry& e, std::size_t bytes) noexcept {
    bin& b = bins_[cls];
    if (b.count == bin_capacity || parked_bytes_ + bytes > max_bytes) return false;
    b.items[b.count++] = e;
    parked_bytes_ += bytes;
    return true;
  }
  void unparked(std::size_t bytes) noexcept { parked_bytes_ -= bytes; }
  [[gnu::always_inline]] void count(counter c, std::int64_t v) noexcept {
    counters_[c].store(counters_[c].load(std::memory_order_relaxed) + v,
                       std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t read(counter c) const noexcept {
    return counters_[c].load(std::memory_order_relaxed);
  }

  // Used by caching_allocator under its mutex.
  void bind(caching_allocator* a, std::uint64_t serial, void* stream, stream_arena* arena) noexcept;
  void unbind() noexcept;
  /// Calls `fn(entry)` for every parked object and empties the bins.
  template <class Fn>
  void drain(Fn fn) {
    for (std::size_t c = 0; c < size_classes::max_classes; ++c) {
      for (std::uint32_t k = 0; k < bins_[c].count; ++k) fn(bins_[c].items[k]);
      bins_[c].count = 0;
    }
    parked_bytes_ = 0;
  }
  void reset_counters() noexcept {
    for (auto& c : counters_) c.store(0, std::memory_order_relaxed);
  }
  /// Counts a call that could not use the cache; true when it is time to
  /// re-bind to the caller's (allocator, stream).
  bool missed() noexcept { return ++misses_ >= 256 || parked_bytes_ == 0; }

  /// Serials of live allocators: an allocator registers when made and
  /// unregisters first thing when destroyed.
  static std::uint64_t register_allocator();
  static void unregister_allocator(std::uint64_t serial);
  /// Flushes this cache into its owner (if alive) and unbinds it. Must be
  /// called without any allocator's mutex held.
  void detach();

 private:
  struct bin {
    std::uint32_t count = 0;
    std::array<entry, bin_capacity> items{};
  };

  static thread_cache& create_for_thread();
  static thread_local thread_cache* current_;  // constant-initialized: no TLS guard

  caching_allocator* owner_ = nullptr;
  std::uint64_t serial_ = 0;
  void* stream_ = nullptr;
  stream_arena* arena_ = nullptr;
  std::size_t parked_bytes_ = 0;
  std::uint32_t misses_ = 0;
  std::array<std::atomic<std::int64_t>, 6> counters_{};
  std::array<bin, size_classes::max_classes> bins_{};
};

}  // namespace strata
