// The public allocate/free entry points and their lock-free fast path:
// a small object freed on a stream is parked in the freeing thread's cache
// and handed out again to the next request of its class on that stream.
// Everything else takes the mutex (caching_allocator.cpp).
#include "caching_allocator.hpp"

namespace strata {

result<void*> caching_allocator::malloc(std::size_t bytes) {
  return malloc_async(bytes, nullptr);
}

result<void*> caching_allocator::malloc_async(std::size_t bytes, void* stream) {
  if (bytes - 1 < classes_.slab_limit()) {  // 1..slab_limit; 0 wraps around
    thread_cache& tc = thread_cache::current();
    if (tc.bound_to(serial_, stream)) {
      // Fast path: one bin pop, no lock, no system call, no allocation.
      if (const thread_cache::entry* e = tc.pop(size_classes::class_of(bytes))) {
        e->s->hand_out(e->index, bytes);
        tc.count(thread_cache::alloc_req, static_cast<std::int64_t>(bytes));
        return reinterpret_cast<void*>(e->addr);
      }
    } else if (tc.missed()) {
      adopt_cache(tc, stream);
    }
  }
  std::lock_guard lock(mu_);
  return allocate(bytes, stream);
}

status caching_allocator::free_async(void* ptr, void* stream) {
  if (ptr == nullptr) return {};
  thread_cache& tc = thread_cache::current();
  if (tc.bound_to(serial_, stream)) {
    // Fast path: a live small object of this stream's arena with no
    // recorded streams goes into the cache.
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    slab* s = tc.slab_of(p);
    const std::int64_t i = s != nullptr ? s->index_of(p) : -1;
    if (i >= 0 && !recorded_any_.load(std::memory_order_relaxed)) {
      const auto index = static_cast<std::uint32_t>(i);
      if (s->state(index) == object_state::live && tc.push(s->size_class, {p, s, index})) {
        tc.count(thread_cache::free_req, static_cast<std::int64_t>(s->requested(index)));
        s->set_state(index, object_state::cached);
        return {};
      }
    }
  } else if (tc.missed()) {
    adopt_cache(tc, stream);
  }
  std::lock_guard lock(mu_);
  return free_async_locked(ptr, stream);
}

void caching_allocator::adopt_cache(thread_cache& tc, void* native_stream) {
  tc.detach();  // flushes into its old owner, which may be this allocator
  std::lock_guard lock(mu_);
  auto st = state_for(native_stream);
  if (!st) return;  // the locked path reports the bad stream
  tc.bind(this, serial_, native_stream, (*st)->small.get(), classes_);
  caches_.push_back(&tc);
}

void caching_allocator::release_cache(thread_cache& tc) {
  std::lock_guard lock(mu_);
  flush_cache(tc);
  std::erase(caches_, &tc);
  tc.unbind();
}

void caching_allocator::flush_cache(thread_cache& tc) {
  // Parked objects go back to their slabs; the counters fold into the shared
  // stats exactly as stats() nets them, so no reported value moves.
  fold_cache_counters(stats_, tc, classes_);
  tc.reset_counters();
  stream_arena& arena = *tc.arena();
  stream_state& st = *streams_.find(tc.stream())->second;
  tc.drain([&](const thread_cache::entry& e) { return_to_slab(st, arena, *e.s, e.index); });
}

void caching_allocator::fold_cache_counters(allocator_stats& s, const thread_cache& tc,
                                            const size_classes& classes) {
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
  const std::int64_t alloc_req = tc.read(thread_cache::alloc_req);
  const std::int64_t free_req = tc.read(thread_cache::free_req);
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
}

}  // namespace strata
