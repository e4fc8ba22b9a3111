#include "cache_binding.hpp"

#include <atomic>

namespace strata {

void cache_binding::fold(allocator_stats& s, const thread_cache& tc) const {
  const size_classes& classes = classes_;
  std::int64_t allocs = 0;
  std::int64_t frees = 0;
  std::int64_t alloc_bytes = 0;
  std::int64_t free_bytes = 0;
  for (std::uint32_t c = 0; c < classes.count(); ++c) {
    const auto size = static_cast<std::int64_t>(classes.class_size(c));
    allocs += tc.parked_out(c);
    frees += tc.parked_in(c);
    alloc_bytes += tc.parked_out(c) * size;
    free_bytes += tc.parked_in(c) * size;
  }
  const std::int64_t alloc_req = tc.bins_requested(thread_cache::direction::out);
  const std::int64_t free_req = tc.bins_requested(thread_cache::direction::in);
  const auto fold = [](stat_array& a, std::int64_t in, std::int64_t out) {
    for (auto p : {pool_all, pool_small}) a[p].fold(in - out, in, out);
  };
  // Parked objects were still counted as allocated and active; the cache's
  // own traffic (user frees into it, user allocations out of it) was not.
  fold(s.allocation, allocs, frees);
  fold(s.active, allocs, frees);
  fold(s.allocated_bytes, alloc_bytes, free_bytes);
  fold(s.active_bytes, alloc_bytes, free_bytes);
  fold(s.requested_bytes, alloc_req, free_req);
  // The slot's traffic, per stats pool.
  using counter = std::atomic<std::int64_t> thread_cache::slot_traffic::*;
  for (const stat_pool pool : {pool_large, pool_small}) {
    const auto& out = tc.slot_counts(pool == pool_small, thread_cache::direction::out);
    const auto& in = tc.slot_counts(pool == pool_small, thread_cache::direction::in);
    const auto fold_slot = [&](stat_array& a, counter c) {
      const std::int64_t o = (out.*c).load(std::memory_order_relaxed);
      const std::int64_t i = (in.*c).load(std::memory_order_relaxed);
      for (auto p : {pool_all, pool}) a[p].fold(o - i, o, i);
    };
    fold_slot(s.allocation, &thread_cache::slot_traffic::blocks);
    fold_slot(s.active, &thread_cache::slot_traffic::blocks);
    fold_slot(s.allocated_bytes, &thread_cache::slot_traffic::bytes);
    fold_slot(s.active_bytes, &thread_cache::slot_traffic::bytes);
    fold_slot(s.requested_bytes, &thread_cache::slot_traffic::requested);
  }
}

}  // namespace strata
