// Per-thread caches: the lock-free fast path.
//
// A thread cache is bound to one (allocator, stream) at a time. A small
// object freed on that stream by this thread is parked in the cache (state
// `cached`) instead of returning to its slab; the next request of the same
// class on that stream takes it back. Both directions touch only this
// thread's memory and the object's own atomic state: no lock, no system
// call, no heap allocation. Everything else takes the allocator's mutex.
//
// The cache also has one large-block slot: a large block freed on the bound
// stream by this thread is parked there, and a request of the same rounded
// size on that stream takes it back (the slot then holds it as `lent`, so
// its free is lock-free too). The slot's state is one atomic that the owner
// thread moves parked -> lent -> parked and the allocator's locked paths
// move to empty (taking the block back): a compare-and-swap decides every
// race, so a block always has exactly one owner.
//
// Accounting: parked objects stay counted as allocated in the allocator's
// shared counters; the cache counts what went in and out, and stats() nets
// the two, so current values are exact. The peak of allocated bytes counts
// the slot's traffic at every locked allocation (slot_net_bytes: a parked
// block the locked path takes back is free at once), so it never passes
// the reserved bytes. Other peaks are updated on the locked path and may
// exceed the true peak by the bytes parked in other threads' caches:
// per class at most 16 objects or 64 KiB, or one object of the classes
// above 64 KiB (about 9 MiB per thread), plus one large block. A thread's own
// parked large block is taken back before it allocates on the locked path,
// so a single thread's peaks are not inflated by it.
//
// Lifetime: a cache outlives allocators (it checks a registry of live ones
// before touching its owner) and flushes itself into its owner when the
// thread exits or the cache is re-bound.
//
// Thread safety: bins and binding are touched only by the owning thread
// (flushes run on that thread, under the owner's mutex). The counters are
// atomics that the owner writes and stats() reads under the owner's mutex.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "block_map.hpp"
#include "size_classes.hpp"

namespace strata {

class caching_allocator;
class stream_arena;
struct slab;

class thread_cache {
 public:
  static constexpr std::uint32_t bin_capacity = 16;
  /// Bytes a bin may park: up to 16 objects, fewer of the larger classes.
  static constexpr std::size_t bin_bytes = std::size_t{64} << 10;

  struct entry {
    std::uintptr_t addr;
    slab* s;
    std::uint32_t index;
  };
  /// One direction of the slot's traffic: blocks, their (rounded) bytes and
  /// the callers' requested bytes.
  struct slot_traffic {
    std::atomic<std::int64_t> blocks{0};
    std::atomic<std::int64_t> bytes{0};
    std::atomic<std::int64_t> requested{0};
  };
  /// `out`: lent to callers; `in`: freed back into the slot.
  enum class direction : std::uint8_t { out, in };

  /// The large-block slot (see above). `addr` and `size` are written by the
  /// owner thread under the allocator's mutex while the slot is empty, and
  /// read by others only after a successful take().
  struct large_slot {
    enum state_t : std::uint8_t { empty, parked, lent };
    std::atomic<std::uint8_t> state{empty};
    std::uintptr_t addr = 0;
    std::size_t size = 0;                   // the block's (rounded) size
    std::atomic<std::size_t> requested{0};  // the caller's size, last allocation
    /// Moves the slot from `from` to `to`; false if it was not in `from`.
    bool take(std::uint8_t from, std::uint8_t to) noexcept {
      return state.compare_exchange_strong(from, to, std::memory_order_acq_rel,
                                           std::memory_order_acquire);
    }
    [[nodiscard]] std::uint8_t load() const noexcept {
      return state.load(std::memory_order_relaxed);
    }
  };

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

  /// Serials are never reused, so the serial alone names the allocator.
  [[nodiscard]] bool bound_to(std::uint64_t serial, void* stream) const noexcept {
    return serial_ == serial && stream_ == stream;
  }
  [[nodiscard]] bool owned_by(std::uint64_t serial) const noexcept { return serial_ == serial; }
  [[nodiscard]] void* stream() const noexcept { return stream_; }

  [[nodiscard]] stream_arena* arena() const noexcept { return arena_; }
  /// The slab holding `p` if `p` lies in the bound small arena, else null.
  /// Copies of the arena's geometry keep this to one dependent load.
  [[nodiscard]] slab* slab_of(std::uintptr_t p) const noexcept {
    const std::uintptr_t off = p - arena_base_;
    if (off >= arena_bytes_) return nullptr;
    return slabs_[off >> slab_shift_].load(std::memory_order_acquire);
  }

  /// Takes a parked object of class `cls` (object size `bytes`), or returns
  /// null. Counts the caller's allocation.
  const entry* pop(std::uint32_t cls) noexcept {
    bin& b = bins_[cls];
    if (b.count == 0) return nullptr;
    add(b.out, 1);
    return &b.items[--b.count];
  }
  /// Parks an object of class `cls` and counts the caller's free; false
  /// when the bin is full.
  bool push(std::uint32_t cls, const entry& e) noexcept {
    bin& b = bins_[cls];
    if (b.count == b.limit) return false;
    b.items[b.count++] = e;
    add(b.in, 1);
    return true;
  }
  /// Bytes the large slot lent out less those freed back into it since
  /// the counters were last folded: what the allocator's shared
  /// allocated_bytes miss of the slot's traffic (a parked block stays
  /// counted there, though the locked path may take it back and reuse its
  /// pages). Any thread may read it (relaxed loads).
  [[nodiscard]] std::int64_t slot_net_bytes() const noexcept {
    std::int64_t n = 0;
    for (const auto& pool : slot_traffic_) {
      n += pool[0].bytes.load(std::memory_order_relaxed) -
           pool[1].bytes.load(std::memory_order_relaxed);
    }
    return n;
  }
  /// Objects of class `cls` that went into / out of the cache.
  [[nodiscard]] std::int64_t parked_in(std::size_t cls) const noexcept {
    return bins_[cls].in.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t parked_out(std::size_t cls) const noexcept {
    return bins_[cls].out.load(std::memory_order_relaxed);
  }
  /// Counts requested bytes allocated from (`out`) or freed into (`in`) the bins.
  void count_bins(direction d, std::int64_t requested) noexcept {
    add(d == direction::out ? bin_requested_out_ : bin_requested_in_, requested);
  }
  [[nodiscard]] std::int64_t bins_requested(direction d) const noexcept {
    return (d == direction::out ? bin_requested_out_ : bin_requested_in_)
        .load(std::memory_order_relaxed);
  }
  /// Counts slot traffic in the large_pool stats, or in the small_pool ones
  /// for blocks above the slab limit but within small_size (`small_pool`).
  void count_slot(bool small_pool, direction d, std::int64_t blocks, std::int64_t bytes,
                  std::int64_t requested) noexcept {
    slot_traffic& t = slot_traffic_[small_pool ? 1 : 0][d == direction::out ? 0 : 1];
    add(t.blocks, blocks);
    add(t.bytes, bytes);
    add(t.requested, requested);
  }
  [[nodiscard]] const slot_traffic& slot_counts(bool small_pool, direction d) const noexcept {
    return slot_traffic_[small_pool ? 1 : 0][d == direction::out ? 0 : 1];
  }
  [[nodiscard]] large_slot& slot() noexcept { return slot_; }

  // Used by caching_allocator under its mutex.
  void bind(caching_allocator* a, std::uint64_t serial, void* stream, stream_arena* arena,
            const size_classes& classes) noexcept;
  void unbind() noexcept;
  /// Calls `fn(entry)` for every parked object and empties the bins.
  template <class Fn>
  void drain(Fn fn) {
    for (std::size_t c = 0; c < size_classes::max_classes; ++c) {
      for (std::uint32_t k = 0; k < bins_[c].count; ++k) fn(bins_[c].items[k]);
      bins_[c].count = 0;
    }
  }
  void reset_counters() noexcept {
    bin_requested_out_.store(0, std::memory_order_relaxed);
    bin_requested_in_.store(0, std::memory_order_relaxed);
    for (auto& pool : slot_traffic_) {
      for (slot_traffic& t : pool) {
        for (auto* c : {&t.blocks, &t.bytes, &t.requested}) c->store(0, std::memory_order_relaxed);
      }
    }
    for (auto& b : bins_) {
      b.in.store(0, std::memory_order_relaxed);
      b.out.store(0, std::memory_order_relaxed);
    }
  }
  /// True when small objects are parked in the bins.
  [[nodiscard]] bool holds_objects() const noexcept {
    return std::ranges::any_of(bins_, [](const bin& b) { return b.count != 0; });
  }
  /// Counts a call that could not use the cache; true when it is time to
  /// re-bind to the caller's (allocator, stream).
  bool missed() noexcept;

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
    std::uint32_t limit = 0;  // set at bind from the class size
    std::array<entry, bin_capacity> items{};
    std::atomic<std::int64_t> in{0};   // user frees parked here
    std::atomic<std::int64_t> out{0};  // user allocations served from here
  };

  // Only the owning thread writes: a relaxed load and store, no locked op.
  static void add(std::atomic<std::int64_t>& a, std::int64_t v) noexcept {
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }

  static thread_cache& create_for_thread();
  static thread_local thread_cache* current_;  // constant-initialized: no TLS guard

  caching_allocator* owner_ = nullptr;
  std::uint64_t serial_ = 0;
  void* stream_ = nullptr;
  stream_arena* arena_ = nullptr;
  std::uintptr_t arena_base_ = 0;
  std::size_t arena_bytes_ = 0;
  unsigned slab_shift_ = 0;
  const std::atomic<slab*>* slabs_ = nullptr;
  std::uint32_t misses_ = 0;
  std::uint64_t deaths_at_bind_ = 0;
  std::atomic<std::int64_t> bin_requested_out_{0};
  std::atomic<std::int64_t> bin_requested_in_{0};
  // [large_pool, small_pool][out, in]
  std::array<std::array<slot_traffic, 2>, 2> slot_traffic_{};
  large_slot slot_;
  std::array<bin, size_classes::max_classes> bins_{};
};

/// True when block `b` sits parked in a thread's slot: freed as far as its
/// user knows and reusable on its stream (a lent block is live).
inline bool is_parked(const block_info& b) noexcept {
  return b.holder != nullptr && b.holder->slot().load() == thread_cache::large_slot::parked;
}

}  // namespace strata
