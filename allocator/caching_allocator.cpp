#include "caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <new>

#include "strata/option_table.hpp"

namespace strata {

result<std::unique_ptr<caching_allocator>> caching_allocator::create(
    const allocator_options& options) {
  if (auto s = check_allocator_options(options); !s) return s;
  auto dev = open_device(options.device);
  if (!dev) return dev.error();
  return create(std::move(*dev), options);
}

result<std::unique_ptr<caching_allocator>> caching_allocator::create(
    std::unique_ptr<device> dev, const allocator_options& options) {
  if (dev == nullptr) return status{errc::invalid_argument, "caching_allocator: null device"};
  if (auto s = check_allocator_options(options); !s) return s;
  auto info = dev->get_memory_info();
  if (!info) return info.error();
  return std::unique_ptr<caching_allocator>(
      new caching_allocator(std::move(dev), options, info->total));
}

namespace {

// A large arena's open epoch is sealed after this many frees (finish_free).
constexpr std::size_t seal_every = 8;

// `options` with small_size a multiple of 512, so a request and its rounded
// block fall in the same stats pool.
allocator_options normalized(allocator_options options) {
  options.small_size &= ~std::uint64_t{511};
  return options;
}

// `times` the pages of a `total`-byte device, at least `least` pages, in
// bytes (pages of `g` bytes).
std::size_t arena_bytes(std::size_t total, std::size_t g, std::size_t times, std::size_t least) {
  return std::max<std::size_t>(times * ((total + g - 1) / g), least) * g;
}

}  // namespace

caching_allocator::caching_allocator(std::unique_ptr<device> dev, const allocator_options& options,
                                     std::size_t total)
    : dev_(std::move(dev)),
      options_(normalized(options)),
      total_(total),
      classes_(options_.small_size, dev_->granularity()),
      events_(*dev_),
      trace_(static_cast<std::size_t>(options_.trace_buffer),
             static_cast<std::size_t>(options_.trace_frames)),
      // Twice the device's pages of address space for a small arena (at
      // least 64), eight times for a large one: every stitch keeps its
      // mappings, fenced off in the address space. Where the device has
      // less to give, down to one device's worth.
      streams_(*dev_, events_, arena_bytes(total, dev_->granularity(), 2, 64),
               arena_bytes(total, dev_->granularity(), 8, 256),
               arena_bytes(total, dev_->granularity(), 1, 1), dev_->granularity()),
      pages_(*dev_, events_, streams_, stats_, trace_,
             static_cast<std::size_t>(static_cast<double>(total) * options_.memory_fraction),
             static_cast<std::size_t>(options_.page_run_size)),
      frees_(*dev_, events_, stats_),
      caches_(classes_, options_.small_size) {}

caching_allocator::~caching_allocator() {
  // The parts release what they hold once no stream has work queued, in
  // reverse order of declaration: the thread-cache binding first (no cache
  // comes back), then the queue's events, the pool's pages, the arenas.
  (void)dev_->synchronize();
}

result<stream_state*> caching_allocator::state_for(void* native) {
  bool made = false;
  auto st = streams_.get(native, made);
  if (st && made) frees_.note_stream((*st)->stream);
  return st;
}

attempt<void*> caching_allocator::allocate(std::size_t bytes, void* native) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  auto st = state_for(native);
  if (!st) return st.error();
  if (bytes > max_request) return attempt<void*>(shortage_of(bytes, (*st)->stream));
  return bytes <= classes_.slab_limit() ? allocate_small(**st, bytes) : allocate_large(**st, bytes);
}

attempt<void*> caching_allocator::allocate_small(stream_state& st, std::size_t bytes) {
  const std::uint32_t cls = size_classes::class_of(bytes);
  if (st.partial[cls].head == nullptr) {
    if (auto made = new_slab(st, cls); !made) return made;
  }
  slab& s = *st.partial[cls].head;
  if (s.empty()) --st.empty_slabs[cls];
  const std::uintptr_t p = s.address(s.take(bytes));
  if (s.full()) unlink_slab(st, s);
  const auto size = static_cast<std::int64_t>(s.object_size);
  stats_.allocation.add(pool_small, 1);
  stats_.active.add(pool_small, 1);
  stats_.allocated_bytes.add(pool_small, size);
  stats_.active_bytes.add(pool_small, size);
  stats_.requested_bytes.add(pool_small, static_cast<std::int64_t>(bytes));
  sample_allocated_peak();
  if (trace_.on()) trace_.record(trace_action::alloc, p, bytes, st.stream.native);
  return reinterpret_cast<void*>(p);
}

attempt<void*> caching_allocator::allocate_large(stream_state& st, std::size_t bytes) {
  // A parked block holds its range until its thread asks for that size
  // again, which in training may be a step later, on the other thread (the
  // backward pass runs on autograd's): placement must see every free range,
  // or the step's requests miss their earlier ranges and stitch anew (an
  // H200's GPT-2 remapped 1866 pages in its fifth step). A parked block
  // still serves its thread's very next request of its size, lock-free.
  (void)reclaim_parked_slots(&st);
  const std::size_t size = size_classes::round(bytes);
  st.replay.reserve();  // before placing: a placed request is always recorded
  const std::size_t counterpart = st.replay.counterpart(size);
  auto it = place(st, *st.large, size, bytes, counterpart);
  if (!it) return it;
  st.replay.record(size, (*it)->first, counterpart);
  (*it)->second.maker = &thread_cache::current();  // bound already: the fast path made it
  const stat_pool pool = bytes <= options_.small_size ? pool_small : pool_large;
  stats_.allocation.add(pool, 1);
  stats_.active.add(pool, 1);
  stats_.allocated_bytes.add(pool, static_cast<std::int64_t>(size));
  stats_.active_bytes.add(pool, static_cast<std::int64_t>(size));
  stats_.requested_bytes.add(pool, static_cast<std::int64_t>(bytes));
  sample_allocated_peak();
  if (trace_.on()) trace_.record(trace_action::alloc, (*it)->first, bytes, st.stream.native);
  return reinterpret_cast<void*>((*it)->first);
}

attempt<slab*> caching_allocator::new_slab(stream_state& st, std::uint32_t cls) {
  stream_arena& arena = *st.small;
  const std::size_t bytes = classes_.slab_bytes(cls);
  auto it = place(st, arena, bytes, classes_.class_size(cls));
  if (!it) return it;
  const std::uintptr_t base = (*it)->first;
  auto* s = new slab(base, cls, classes_.class_size(cls), bytes);  // NOLINT
  arena.set_slab(base, bytes, s);
  s->older = st.slabs;
  if (st.slabs != nullptr) st.slabs->newer = s;
  st.slabs = s;
  link_slab(st, *s);
  ++st.empty_slabs[cls];
  return s;
}

block_map::iterator caching_allocator::take(stream_arena& arena, block_map::iterator it,
                                            std::size_t size, std::size_t requested) {
  it = arena.blocks().allocate(it, size, requested);
  pages_.block_live(arena, it->first, size);
  return it;
}

attempt<block_map::iterator> caching_allocator::place(stream_state& st, stream_arena& arena,
                                                      std::size_t size, std::size_t requested,
                                                      std::size_t counterpart) {
  bool may_grow = !options_.wait_before_grow;
  pages_.settle();
  // Where the earlier steps' layout says (step_placement.cpp).
  if (counterpart != step_replay::none) {
    if (auto it = place_by_step(st, arena, size, requested, counterpart)) return *it;
  }
  for (int round = 0; round < 16; ++round) {
    auto it = arena.blocks().first_fit(size);
    if (it == arena.blocks().end()) {
      // The arena's address space is spent (every stitch keeps its
      // mappings): give back the mappings no block uses, else let pending
      // frees complete (their blocks' ranges come back), then look again.
      if (pages_.unmap_unused(arena) > 0) continue;
      auto progressed = relieve_shortage(true);
      if (!progressed.ok()) return progressed.error();
      if (!progressed.yes()) break;
      ++stats_.num_alloc_retries;
      continue;
    }
    if (!it->second.mapped) {
      // Backing maps pages only: the block map, and `it`, stay as they are.
      status backed = pages_.back_range(arena, it->first, size, may_grow);
      if (!backed.ok()) {
        if (backed.code() != errc::out_of_memory) return backed;
        auto progressed = relieve_shortage(may_grow);
        if (!progressed.ok()) return progressed.error();
        if (progressed.yes()) {
          ++stats_.num_alloc_retries;  // memory came back from pending frees: try again
        } else if (may_grow) {
          break;
        } else {
          may_grow = true;  // nothing to wait for: growing is the next step, not a retry
        }
        continue;
      }
    }
    return take(arena, it, size, requested);
  }
  return attempt<block_map::iterator>(shortage_of(requested, st.stream));
}

void caching_allocator::return_to_slab(stream_state& st, stream_arena& arena, slab& s,
                                       std::uint32_t index) {
  s.give(index);
  if (!s.listed) link_slab(st, s);
  if (!s.empty()) return;
  if (st.empty_slabs[s.size_class] == 0) {
    ++st.empty_slabs[s.size_class];  // keep one empty slab per class
    return;
  }
  destroy_slab(st, arena, s);
  pages_.release_above(options_.release_threshold);
}

void caching_allocator::destroy_slab(stream_state& st, stream_arena& arena, slab& s) {
  unlink_slab(st, s);
  const std::size_t bytes = classes_.slab_bytes(s.size_class);
  arena.set_slab(s.base, bytes, nullptr);
  arena.mark_freed(s.base, bytes);
  pages_.block_dead(arena, s.base, bytes);
  arena.blocks().release(arena.blocks().find_in_use(s.base));
  if (s.newer != nullptr) s.newer->older = s.older;
  if (s.older != nullptr) s.older->newer = s.newer;
  if (st.slabs == &s) st.slabs = s.older;
  delete &s;  // NOLINT(cppcoreguidelines-owning-memory)
}

std::size_t caching_allocator::drop_empty_slabs() {
  std::size_t dropped = 0;
  streams_.for_each([&](stream_state& st) {
    for (std::size_t c = 0; c < classes_.count(); ++c) {
      for (slab* s = st.partial[c].head; s != nullptr;) {
        slab* next = s->next;
        if (s->empty()) {
          destroy_slab(st, *st.small, *s);
          ++dropped;
        }
        s = next;
      }
      st.empty_slabs[c] = 0;
    }
  });
  return dropped;
}

void caching_allocator::link_slab(stream_state& st, slab& s) {
  stream_state::slab_list& list = st.partial[s.size_class];
  s.prev = nullptr;
  s.next = list.head;
  if (list.head != nullptr) list.head->prev = &s;
  list.head = &s;
  s.listed = true;
}

void caching_allocator::unlink_slab(stream_state& st, slab& s) {
  stream_state::slab_list& list = st.partial[s.size_class];
  if (s.prev != nullptr) s.prev->next = s.next;
  if (s.next != nullptr) s.next->prev = s.prev;
  if (list.head == &s) list.head = s.next;
  s.prev = s.next = nullptr;
  s.listed = false;
}

result<caching_allocator::located> caching_allocator::locate(void* ptr, const char* what) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  const std::size_t k = streams_.arena_of(p);
  const auto bad = [&] {
    return status{errc::invalid_argument,
                  std::string(what) +
                      ": pointer is not a live allocation of this allocator (foreign pointer, "
                      "or already freed)"};
  };
  if (k == streams_.arenas().size()) return bad();
  stream_arena* arena = streams_.arenas()[k];
  located where;
  where.arena = arena;
  where.owner = &streams_.owner(k);
  if (arena->kind() == pool_kind::small) {
    where.s = arena->slab_of(p);
    if (where.s == nullptr) return bad();
    const std::int64_t i = where.s->index_of(p);
    if (i < 0 || where.s->state(static_cast<std::uint32_t>(i)) != object_state::live) {
      return bad();
    }
    where.index = static_cast<std::uint32_t>(i);
  } else {
    where.block = arena->blocks().find_in_use(p);
    if (where.block == arena->blocks().end() ||
        where.block->second.state != block_state::allocated) {
      return bad();
    }
    if (where.block->second.holder != nullptr && !unlend(where.block->second)) return bad();
  }
  return where;
}

void caching_allocator::count_free_request(const located& where) {
  if (trace_.on()) {
    const bool small = where.s != nullptr;
    trace_.record(trace_action::free_requested,
                  small ? where.s->address(where.index) : where.block->first,
                  small ? where.s->requested(where.index) : where.block->second.requested,
                  where.owner->stream.native);
  }
  if (where.s != nullptr) {
    stats_.allocation.add(pool_small, -1);
    stats_.allocated_bytes.add(pool_small, -static_cast<std::int64_t>(where.s->object_size));
    stats_.requested_bytes.add(pool_small,
                               -static_cast<std::int64_t>(where.s->requested(where.index)));
    where.s->set_state(where.index, object_state::pending);
    return;
  }
  const block_info& b = where.block->second;
  const stat_pool pool = b.requested <= options_.small_size ? pool_small : pool_large;
  stats_.allocation.add(pool, -1);
  stats_.allocated_bytes.add(pool, -static_cast<std::int64_t>(b.size));
  stats_.requested_bytes.add(pool, -static_cast<std::int64_t>(b.requested));
  block_map::set_pending(where.block);
}

status caching_allocator::defer_free(const located& where, stream_handle free_stream,
                                     bool device_wide) {
  const auto addr = where.s != nullptr ? where.s->address(where.index) : where.block->first;
  if (auto s = frees_.defer({where.owner, where.arena, addr, {}}, where.owner->stream, free_stream,
                            device_wide);
      !s) {
    return s;  // nothing changed: the block is still allocated
  }
  count_free_request(where);
  return {};
}

void caching_allocator::count_locked_call(std::chrono::steady_clock::time_point start) {
  ++stats_.num_locked_calls;
  stats_.locked_call_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
}

status caching_allocator::free(void* ptr) {
  if (ptr == nullptr) return {};
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto where = locate(ptr, "free");
  status s = where ? defer_free(*where, {}, true) : where.error();
  count_locked_call(start);
  return s;
}

status caching_allocator::free_async_locked(void* ptr, void* native) {
  auto where = locate(ptr, "free_async");
  if (!where) return where.error();
  stream_handle stream = where->owner->stream;
  if (native != stream.native) {
    auto wrapped = dev_->wrap_stream(native);
    if (!wrapped) return wrapped.error();
    stream = *wrapped;
  }
  const bool other_stream = stream != where->owner->stream;
  const bool recorded = frees_.recorded(reinterpret_cast<std::uintptr_t>(ptr));
  if (other_stream || recorded) return defer_free(*where, stream, false);
  if (park(*where, native)) return {};
  count_free_request(*where);
  if (where->s != nullptr) {
    finish_free(*where->owner, *where->arena, reinterpret_cast<std::uintptr_t>(ptr));
  } else {
    finish_free_block(*where->owner, *where->arena, where->block);
  }
  return {};
}

status caching_allocator::record_stream(void* ptr, void* native_stream) {
  std::lock_guard lock(mu_);
  auto where = locate(ptr, "record_stream");
  if (!where) return where.error();
  auto stream = dev_->wrap_stream(native_stream);
  if (!stream) return stream.error();
  frees_.record(reinterpret_cast<std::uintptr_t>(ptr), where->owner->stream, *stream);
  return {};
}

// Returns a freed block (whose free was already counted) to its arena, where
// its own stream may reuse it at once.
void caching_allocator::finish_free(stream_state& st, stream_arena& arena, std::uintptr_t addr) {
  if (arena.kind() == pool_kind::small) {
    slab& s = *arena.slab_of(addr);
    const auto size = static_cast<std::int64_t>(s.object_size);
    stats_.active.add(pool_small, -1);
    stats_.active_bytes.add(pool_small, -size);
    if (trace_.on()) {
      trace_.record(trace_action::free_completed, addr,
                    s.requested(static_cast<std::uint32_t>(s.index_of(addr))), st.stream.native);
    }
    return_to_slab(st, arena, s, static_cast<std::uint32_t>(s.index_of(addr)));
    return;
  }
  finish_free_block(st, arena, arena.blocks().find_in_use(addr));
}

void caching_allocator::finish_free_block(stream_state& st, stream_arena& arena,
                                          block_map::iterator it) {
  const std::uintptr_t addr = it->first;
  const block_info& b = it->second;
  const stat_pool pool = b.requested <= options_.small_size ? pool_small : pool_large;
  stats_.active.add(pool, -1);
  stats_.active_bytes.add(pool, -static_cast<std::int64_t>(b.size));
  if (trace_.on()) trace_.record(trace_action::free_completed, addr, b.requested, st.stream.native);
  arena.mark_freed(it->first, b.size);
  pages_.block_dead(arena, it->first, b.size);
  arena.blocks().release(it);
  // The clock is read at every `seal_every`-th open free only: read at
  // every free once `seal_every` were open, it was a tenth of a locked
  // pair's time (bench/RESULTS.md, "Large sizes in turn").
  if (arena.open_frees() % seal_every == 0 && arena.open_frees() > 0 &&
      arena.seal_due(dev_->host_clock())) {
    // An epoch sealed soon after its frees is known done soon after the
    // GPU passes them: a later step may then unmap there (a repair,
    // page_repair.cpp) without waiting. Two event calls per `seal_every`
    // frees, at most once per `epoch_interval_s`; a failed call leaves
    // the epoch open (it is sealed later).
    (void)arena.seal(*dev_, events_);
    (void)arena.poll_if_due(*dev_, events_);
  }
  pages_.release_above(options_.release_threshold);
}

status caching_allocator::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return {errc::invalid_argument, "set_memory_fraction: fraction must be in (0, 1]"};
  }
  std::lock_guard lock(mu_);
  options_.memory_fraction = fraction;
  pages_.set_limit(static_cast<std::size_t>(static_cast<double>(total_) * fraction));
  return {};
}

allocator_stats caching_allocator::stats() {
  std::lock_guard lock(mu_);
  return current_stats();
}

allocator_stats caching_allocator::current_stats() {
  pages_.refresh_derived_stats();
  allocator_stats view = stats_;
  caches_.fold_all(view);
  sample_allocated_peak();
  stat& allocated = view.allocated_bytes[pool_all];
  allocated.peak = std::max(allocated_peak_, allocated.current);
  view.driver = dev_->call_totals();
  return view;
}

void caching_allocator::reset_peak_stats() {
  std::lock_guard lock(mu_);
  stats_.reset_peaks();
  allocated_peak_ = stats_.allocated_bytes[pool_all].current + caches_.slot_net_bytes();
}

status caching_allocator::empty_cache() {
  return trim(0);
}

status caching_allocator::trim(std::size_t keep_bytes) {
  std::lock_guard lock(mu_);
  if (thread_cache& tc = thread_cache::current(); tc.owned_by(caches_.serial())) flush_cache(tc);
  reclaim_parked_slots();
  // Pending frees may empty slabs, and dropped slabs free pages in the open
  // epoch: wait, drop, wait again, then release.
  if (auto s = wait_for_everything(); !s) return s;
  if (drop_empty_slabs() > 0) {
    if (auto s = wait_for_everything(); !s) return s;
  }
  auto s = pages_.release_idle(keep_bytes);
  pages_.refresh_derived_stats();
  return s;
}

}  // namespace strata
