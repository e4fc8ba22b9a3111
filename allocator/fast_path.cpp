// The public allocate/free entry points and their lock-free fast path:
// a small object freed on a stream is parked in the freeing thread's cache
// and handed out again to the next request of its class on that stream; a
// large block is parked in the cache's one slot and handed out again to the
// next request of its rounded size on that stream.
// Everything else takes the mutex (caching_allocator.cpp).
#include "caching_allocator.hpp"

#include <chrono>
#include <limits>

namespace strata {

using slot_state = thread_cache::large_slot;

[[gnu::always_inline]] inline result<void*> caching_allocator::allocate_fast(std::size_t bytes,
                                                                             void* stream) {
  thread_cache& tc = thread_cache::current();
  if (tc.bound_to(caches_.serial(), stream)) {
    if (bytes - 1 < classes_.slab_limit()) {  // 1..slab_limit; 0 wraps around
      // Fast path: one bin pop, no lock, no system call, no allocation.
      if (const thread_cache::entry* e = tc.pop(size_classes::class_of(bytes))) {
        e->s->hand_out(e->index, bytes);
        tc.count_bins(thread_cache::direction::out, static_cast<std::int64_t>(bytes));
        return reinterpret_cast<void*>(e->addr);
      }
    } else if (bytes > classes_.slab_limit() && bytes <= max_request) {
      // Fast path: the parked large block, if it has this rounded size.
      thread_cache::large_slot& ls = tc.slot();
      if (ls.load() == slot_state::parked && ls.size == size_classes::round(bytes)) {
        ls.requested.store(bytes, std::memory_order_relaxed);
        if (ls.take(slot_state::parked, slot_state::lent)) {
          caches_.count_slot(tc, thread_cache::direction::out, bytes);
          return reinterpret_cast<void*>(ls.addr);
        }
      }
    }
  } else if (!trace_.on() && bytes != 0 && tc.missed()) {
    // (With the trace on, caches never bind: every call is traced in order.)
    adopt_cache(tc, stream);
  }
  return allocate_or_relieve(tc, bytes, stream);
}

[[gnu::always_inline]] inline status caching_allocator::free_fast(void* ptr, void* stream) {
  if (ptr == nullptr) return {};
  thread_cache& tc = thread_cache::current();
  if (tc.bound_to(caches_.serial(), stream)) {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    // Fast path: the large block this thread's slot lent out goes back.
    thread_cache::large_slot& ls = tc.slot();
    if (ls.addr == p && ls.load() == slot_state::lent &&
        ls.take(slot_state::lent, slot_state::parked)) {
      caches_.count_slot(tc, thread_cache::direction::in,
                         ls.requested.load(std::memory_order_relaxed));
      return {};
    }
    // Fast path: a live small object of this stream's arena with no
    // recorded streams goes into the cache.
    slab* s = tc.slab_of(p);
    const std::int64_t i = s != nullptr ? s->index_of(p) : -1;
    if (i >= 0 && !frees_.recorded_any()) {
      const auto index = static_cast<std::uint32_t>(i);
      if (s->state(index) == object_state::live && tc.push(s->size_class, {p, s, index})) {
        tc.count_bins(thread_cache::direction::in, static_cast<std::int64_t>(s->requested(index)));
        s->set_state(index, object_state::cached);
        return {};
      }
    }
  } else if (!trace_.on() && tc.missed()) {
    adopt_cache(tc, stream);
  }
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  status s = free_async_locked(ptr, stream);
  count_locked_call(start);
  return s;
}

result<void*> caching_allocator::malloc(std::size_t bytes) {
  return allocate_fast(bytes, nullptr);
}
result<void*> caching_allocator::malloc_async(std::size_t bytes, void* stream) {
  return allocate_fast(bytes, stream);
}
status caching_allocator::free_async(void* ptr, void* stream) {
  return free_fast(ptr, stream);
}

// strata::allocator's entry points (strata.hpp) live here, with the fast
// path inlined into them.
result<void*> allocator::try_malloc(std::size_t bytes) {
  return impl().allocate_fast(bytes, nullptr);
}
status allocator::try_free(void* ptr) {
  return impl().free(ptr);
}
result<void*> allocator::try_malloc_async(std::size_t bytes, void* stream) {
  return impl().allocate_fast(bytes, stream);
}
status allocator::try_free_async(void* ptr, void* stream) {
  return impl().free_fast(ptr, stream);
}

bool caching_allocator::park(const located& where, void* native) {
  if (where.s != nullptr) return false;  // small objects have the bins
  thread_cache& tc = thread_cache::current();
  block_info& b = where.block->second;
  // With a release threshold, freed memory should go back promptly: no parking.
  if (!tc.bound_to(caches_.serial(), native) || tc.slot().load() != slot_state::empty ||
      options_.release_threshold != std::numeric_limits<std::uint64_t>::max()) {
    return false;
  }
  // Another thread's block goes straight back to its arena: the freeing
  // thread seldom asks for its size next (autograd frees what the forward
  // pass allocated on the main thread), and parked, the block keeps its
  // range from first fit until the next locked large request. Parking them
  // too cost the two-thread replay of cs336_train_fwd_bwd_cold 954 -> 962
  // MiB at its peak, with no more lock-free reuse (bench/RESULTS.md).
  if (b.maker != &tc) return false;
  thread_cache::large_slot& ls = tc.slot();
  ls.addr = where.block->first;
  ls.size = b.size;
  ls.requested.store(b.requested, std::memory_order_relaxed);
  b.holder = &tc;
  caches_.count_slot(tc, thread_cache::direction::in, b.requested);
  ls.state.store(slot_state::parked, std::memory_order_release);
  return true;
}

bool caching_allocator::reclaim_parked(thread_cache& tc) {
  thread_cache::large_slot& ls = tc.slot();
  if (!ls.take(slot_state::parked, slot_state::empty)) return false;
  // The user freed it on its own stream, so it is reusable there at once.
  // Its stats stay as they are: the cache's counters net it out.
  stream_arena& arena = *streams_.find(tc.stream())->large;
  auto it = arena.blocks().find_in_use(ls.addr);
  arena.mark_freed(it->first, it->second.size);
  pages_.block_dead(arena, it->first, it->second.size);
  arena.blocks().release(it);
  return true;
}

std::size_t caching_allocator::reclaim_parked_slots(const stream_state* only) {
  std::size_t n = 0;
  for (thread_cache* tc : caches_.caches()) {
    if (only != nullptr && tc->stream() != only->stream.native) continue;
    n += reclaim_parked(*tc) ? 1 : 0;
  }
  return n;
}

bool caching_allocator::unlend(block_info& b) {
  thread_cache::large_slot& ls = b.holder->slot();
  if (!ls.take(slot_state::lent, slot_state::empty)) return false;  // parked: freed already
  b.requested = ls.requested.load(std::memory_order_relaxed);
  b.holder = nullptr;
  return true;
}

void caching_allocator::adopt_cache(thread_cache& tc, void* native_stream) {
  tc.detach();  // flushes into its old owner, which may be this allocator
  std::lock_guard lock(mu_);
  auto st = state_for(native_stream);
  if (!st) return;  // the locked path reports the bad stream
  tc.bind(this, caches_.serial(), native_stream, (*st)->small.get(), classes_);
  caches_.add(tc);
}

void caching_allocator::release_cache(thread_cache& tc) {
  std::lock_guard lock(mu_);
  flush_cache(tc);
  caches_.remove(tc);
  tc.unbind();
}

void caching_allocator::flush_cache(thread_cache& tc) {
  // Parked objects go back to their slabs; the counters fold into the shared
  // stats exactly as stats() nets them, so no reported value moves.
  caches_.fold(stats_, tc);
  tc.reset_counters();
  stream_arena& arena = *tc.arena();
  stream_state& st = *streams_.find(tc.stream());
  tc.drain([&](const thread_cache::entry& e) { return_to_slab(st, arena, *e.s, e.index); });
  if (!reclaim_parked(tc) && tc.slot().load() == slot_state::lent) {
    stream_arena& large = *st.large;
    (void)unlend(large.blocks().find_in_use(tc.slot().addr)->second);
  }
}

}  // namespace strata
