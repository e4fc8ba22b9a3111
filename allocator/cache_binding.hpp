// The thread caches bound to one allocator, and how their private counters
// fold into the allocator's stats.
//
// A thread cache (thread_cache.hpp) serves one thread on one stream of one
// allocator without the mutex. The binding owns the allocator's serial (its
// entry in the registry of live allocators, so a cache never touches a
// destroyed one) and the list of caches bound to it.
//
// Invariants: every cache in the list is bound to this serial; a cache's
// counters, folded in, give exactly the stats the allocator would have kept
// had every call taken the mutex.
//
// Thread safety: none; the allocator's mutex serializes calls. Destroying
// the binding unregisters the serial first: caches of exiting threads then
// leave the allocator alone.
#pragma once

#include <cstdint>
#include <vector>

#include "size_classes.hpp"
#include "strata/allocator_stats.hpp"
#include "thread_cache.hpp"

namespace strata {

class cache_binding {
 public:
  // `classes` (the allocator's size classes) must outlive the binding;
  // blocks of at most `small_size` bytes count in the small stats pool.
  cache_binding(const size_classes& classes, std::uint64_t small_size)
      : classes_(classes), small_size_(small_size), serial_(thread_cache::register_allocator()) {}
  cache_binding(const cache_binding&) = delete;
  cache_binding& operator=(const cache_binding&) = delete;
  cache_binding(cache_binding&&) = delete;
  cache_binding& operator=(cache_binding&&) = delete;
  ~cache_binding() { thread_cache::unregister_allocator(serial_); }

  [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }
  void add(thread_cache& tc) { caches_.push_back(&tc); }
  void remove(thread_cache& tc) { std::erase(caches_, &tc); }
  [[nodiscard]] const std::vector<thread_cache*>& caches() const noexcept { return caches_; }

  // Counts the block in `tc`'s slot lent (out) or taken back (in), in the
  // counters of its stats pool; `sign` -1 takes a count back. Lock-free:
  // the owner thread's atomics only.
  void count_slot(thread_cache& tc, thread_cache::direction d, std::size_t requested,
                  std::int64_t sign = 1) const {
    const std::size_t size = tc.slot().size;
    tc.count_slot(size <= small_size_, d, sign, sign * static_cast<std::int64_t>(size),
                  sign * static_cast<std::int64_t>(requested));
  }
  // Adds `tc`'s counters to `s` as stats() reports them.
  void fold(allocator_stats& s, const thread_cache& tc) const;
  // The bytes the bound caches' large slots add to the shared
  // allocated_bytes (see thread_cache::slot_net_bytes).
  [[nodiscard]] std::int64_t slot_net_bytes() const noexcept {
    std::int64_t n = 0;
    for (const thread_cache* tc : caches_) n += tc->slot_net_bytes();
    return n;
  }
  // Adds every bound cache's counters to `s`.
  void fold_all(allocator_stats& s) const {
    for (const thread_cache* tc : caches_) fold(s, *tc);
  }

 private:
  const size_classes& classes_;
  std::uint64_t small_size_;
  std::uint64_t serial_;
  std::vector<thread_cache*> caches_;
};

}  // namespace strata
