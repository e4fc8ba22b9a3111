// The caching device allocator: stream-ordered, page-backed, with stats.
//
// A coordinator over parts that own their state (docs/allocator.md, "Map of
// the allocator"): the stream table (streams, arenas, slabs), the page
// supply (pages, stitcher), the deferred-free queue, the thread-cache
// binding, the pressure handlers, the stats and the trace. It owns only the
// mutex, the options and the last OOM report; what crosses parts (placing
// a block, returning one, the OOM chain) is written here.
//
// Layout: each stream gets two arenas (small and large), each a reserved
// virtual range into which physical pages (one granularity each) are mapped
// on demand. Small requests come from size-class slabs (one page each) in
// the small arena; larger ones by first fit with split and coalesce in the
// large arena. Idle pages live in a page pool and move between arenas by
// unmapping and remapping, so free memory anywhere can back a request
// anywhere: the allocator grows only when no idle page exists.
//
// Frees:
//   - free_async(p, S) on p's own stream (and no record_stream): reusable at
//     once on that stream (stream order protects it);
//   - on another stream, or with recorded streams: pending until events
//     recorded at free time on those streams complete;
//   - free(p): device-wide (like cudaFree): pending until all work queued
//     before the free on every stream the allocator has seen is done. Frees
//     are batched; the batch is sealed with one event per stream when the
//     cache needs memory, and synchronized only if memory is still short.
// Events are polled only on the slow path, never waited for on the fast path.
//
// The OOM chain (place(), page_supply.cpp, oom_chain.cpp): a request that finds no
// backed range reclaims completed frees; stitches idle pages from holes
// anywhere into a contiguous range (unmapped there, mapped here, no copy);
// creates pages within the limit; waits for the streams that guard freed
// memory and gives up cached empty slabs and parked blocks; calls the
// registered pressure handlers (without the mutex); retries; and only then
// fails with out_of_memory and an oom_report, returned with the error.
//
// Fast path (a block this thread freed on the same stream: a small object in
// its thread cache, or a large block of the same rounded size in its slot):
// no lock, no system call, no heap allocation (fast_path.cpp).
//
// Thread safety: every public call may be made from any thread at any time;
// everything but the fast path is serialized by one mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache_binding.hpp"
#include "deferred_frees.hpp"
#include "event_pool.hpp"
#include "event_trace.hpp"
#include "oom_report.hpp"
#include "page_supply.hpp"
#include "pressure_handlers.hpp"
#include "size_classes.hpp"
#include "slab.hpp"
#include "spin_mutex.hpp"
#include "stats_sources.hpp"
#include "strata/allocator_options.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"
#include "strata/strata.hpp"
#include "stream_arena.hpp"
#include "stream_table.hpp"
#include "thread_cache.hpp"

namespace strata {

class caching_allocator {
 public:
  /// Opens `options.device` and builds an allocator on it.
  static result<std::unique_ptr<caching_allocator>> create(const allocator_options& options);
  /// Builds an allocator on a device the caller opened (tests: a sim device
  /// with faults armed). `options.device` is ignored.
  static result<std::unique_ptr<caching_allocator>> create(std::unique_ptr<device> dev,
                                                           const allocator_options& options);
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;
  caching_allocator(caching_allocator&&) = delete;
  caching_allocator& operator=(caching_allocator&&) = delete;
  /// Waits for the device, then returns every page and range to it.
  ~caching_allocator();

  /// Device-wide allocation (usable on any stream; free with `free`).
  /// Size 0 gives null. Errors: out_of_memory (with the numbers).
  result<void*> malloc(std::size_t bytes);
  /// Device-wide free (see above). Null is a no-op. Errors:
  /// invalid_argument for a pointer this allocator did not hand out or
  /// already freed (state unchanged).
  status free(void* ptr);
  /// Stream-ordered allocation on `stream` (a native stream handle; null is
  /// the default stream).
  result<void*> malloc_async(std::size_t bytes, void* stream);
  /// Stream-ordered free on `stream`.
  status free_async(void* ptr, void* stream);
  /// The free of `ptr` also waits for work queued on `stream` up to the free.
  status record_stream(void* ptr, void* native_stream);

  /// trim(0): returns every page not backing a live block to the device.
  status empty_cache();
  /// Waits for pending frees and for the streams that still have work on
  /// freed memory, then returns idle pages to the device until at most
  /// `keep_bytes` of them remain cached.
  status trim(std::size_t keep_bytes);
  /// Limits the bytes held to `fraction` (0, 1] of the device's memory.
  status set_memory_fraction(double fraction);

  [[nodiscard]] allocator_stats stats();
  void reset_peak_stats();
  /// A table in the layout of torch.cuda.memory_summary().
  [[nodiscard]] std::string memory_summary();
  /// JSON: the arenas with their mapped pages and blocks (see docs/allocator.md).
  [[nodiscard]] std::string snapshot_json();
  /// The same state as a Python pickle in the structure of PyTorch's
  /// torch.cuda.memory._dump_snapshot ("segments", "device_traces"), which
  /// PyTorch's memory visualizer opens (see docs/allocator.md).
  [[nodiscard]] std::string snapshot_pickle();
  /// The event trace as JSON (see event_trace.hpp); empty events when the
  /// trace is off (trace_buffer:0).
  [[nodiscard]] std::string trace_json();
  /// Which pages are mapped, per arena (strata::arena_pages).
  [[nodiscard]] std::vector<arena_pages> page_map();
  /// The last OOM's report as JSON, or "null" if none happened.
  [[nodiscard]] std::string last_oom_report();
  /// True if `ptr` lies in address space this allocator reserved (live,
  /// cached or never used alike): how an integration tells a double free of
  /// ours from someone else's pointer. Takes the mutex.
  [[nodiscard]] bool owns(const void* ptr);
  /// See allocator::live_bytes_from.
  [[nodiscard]] std::optional<std::size_t> live_bytes_from(const void* ptr);
  /// The device's total memory, and what an allocation could get now: the
  /// device's free memory plus this allocator's cached bytes (reserved but
  /// not allocated), at most the limit minus what is allocated. Errors: the
  /// device's.
  result<memory_info> available_memory();

  /// Asked to free `bytes` of this allocator's device memory when a request
  /// fails; returns the bytes it freed. Called without the allocator's mutex
  /// held (it may free through this allocator), from the failing thread.
  /// A handler that throws counts as freeing nothing.
  using pressure_handler = pressure_handlers::handler;
  /// Registers `h`; returns its id (never 0).
  std::uint64_t add_pressure_handler(pressure_handler h);
  /// Unregisters handler `id`; invalid_argument if there is none. A call of
  /// the handler already under way finishes.
  status remove_pressure_handler(std::uint64_t id);
  /// Counters of the layers above, reported under `section` (see
  /// stats_sources.hpp); returns the source's id (never 0). `read` is called
  /// without the allocator's mutex held.
  std::uint64_t add_stats_source(std::string section, stats_sources::source read);
  /// Unregisters source `id`; invalid_argument if there is none.
  status remove_stats_source(std::uint64_t id);
  /// stats() by name, with every stats source's counters.
  [[nodiscard]] stat_map stats_map();

  device& dev() noexcept { return *dev_; }

  /// Flushes `tc` (bound to this allocator) and unbinds it. Called by the
  /// cache itself, without this allocator's mutex held.
  void release_cache(thread_cache& tc);
  [[nodiscard]] const allocator_options& options() const noexcept { return options_; }

 private:
  // Where a live pointer lives.
  struct located {
    stream_state* owner = nullptr;
    stream_arena* arena = nullptr;
    slab* s = nullptr;            // small
    std::uint32_t index = 0;      // small
    block_map::iterator block{};  // large
  };

  caching_allocator(std::unique_ptr<device> dev, const allocator_options& options,
                    std::size_t total);

  // fast_path.cpp: the bodies of malloc_async and free_async, inlined there
  // into them and into strata::allocator's entry points (a friend), so the
  // public API adds no call to the fast path.
  friend class allocator;
  [[gnu::always_inline]] inline result<void*> allocate_fast(std::size_t bytes, void* stream);
  [[gnu::always_inline]] inline status free_fast(void* ptr, void* stream);

  // Larger requests fail as out of memory before any rounding can overflow.
  static constexpr std::size_t max_request = std::size_t{1} << 60;

  // oom_chain.cpp: the OOM chain's steps outside place(), and its end.
  result<void*> allocate_or_relieve(thread_cache& tc, std::size_t bytes, void* native_stream);
  // Takes the mutex, returns this thread's parked block, allocates.
  attempt<void*> allocate_locked(thread_cache& tc, std::size_t bytes, void* native_stream);
  // Takes `tc`'s parked block back into its arena with exact stats (the
  // owner thread, under the mutex).
  void unpark(thread_cache& tc);
  // Reclaims completed frees, else waits for pending ones (and, under
  // `pressure`, gives up cached empty slabs); yes if memory may have come free.
  yes_no relieve_shortage(bool pressure);
  [[nodiscard]] bool anything_waiting();
  status wait_for_everything();
  // Returns the deferred frees that completed to their arenas; yes if any did.
  yes_no reclaim_completed();
  // Seals the open batch, waits for every stream and returns every
  // deferred free.
  status finish_all_deferred();

  // allocator_report.cpp: the reporter. Reads the state under the mutex.
  // What a request of `bytes` on `stream` lacks: the report's needed and
  // obtainable bytes and what they come from, without walking the blocks
  // (the chain's handlers and retry need no more; most shortages end there).
  [[nodiscard]] oom_report shortage_of(std::size_t bytes, stream_handle stream);
  void measure_shortage(oom_report& r);
  // The whole report of the OOM that stands, from the state now: the
  // shortage again, the stats, the largest blocks, the pending frees and
  // the verdict. Walks every block and pending free.
  void describe_oom(oom_report& r);
  // Bytes of pages a request of `bytes` occupies once rounded.
  [[nodiscard]] std::size_t backing_bytes(std::size_t bytes) const;
  [[nodiscard]] std::string summary_of(const allocator_stats& st);
  // The stats as stats() reports them: derived values refreshed, thread
  // caches' counters folded in. Needs the mutex.
  [[nodiscard]] allocator_stats current_stats();
  // Raises the peak of allocated bytes to what is allocated now, the
  // blocks other threads' slots lent counted and those parked there not
  // (stats_'s own peak counts a parked block as allocated even after the
  // locked path took it back and reused its pages, so it could pass the
  // reserved bytes). Parked small objects stay counted: their slabs keep
  // their pages.
  void sample_allocated_peak() noexcept {
    allocated_peak_ = std::max(allocated_peak_,
                               stats_.allocated_bytes[pool_all].current + caches_.slot_net_bytes());
  }

  // fast_path.cpp: the thread-cache paths.
  // Parks a block freed on its own stream in the calling thread's empty
  // slot (bound to `native`); false if it does not qualify.
  bool park(const located& where, void* native);
  // Takes `tc`'s parked block back into its arena (stats untouched: the
  // cache's counters net it); false if the slot held none.
  bool reclaim_parked(thread_cache& tc);
  // Takes back every parked block (only those on `only`'s stream, when
  // given), whichever thread parked it; returns how many.
  std::size_t reclaim_parked_slots(const stream_state* only = nullptr);
  // Takes a block out of its holder's slot if it is lent (live); false if it
  // is parked (the caller already freed it).
  static bool unlend(block_info& b);
  void adopt_cache(thread_cache& tc, void* native_stream);
  void flush_cache(thread_cache& tc);

  // caching_allocator.cpp: the locked paths.
  status free_async_locked(void* ptr, void* native_stream);
  void return_to_slab(stream_state& st, stream_arena& arena, slab& s, std::uint32_t index);
  attempt<void*> allocate(std::size_t bytes, void* native_stream);
  result<stream_state*> state_for(void* native_stream);
  result<located> locate(void* ptr, const char* what);
  attempt<void*> allocate_small(stream_state& st, std::size_t bytes);
  attempt<void*> allocate_large(stream_state& st, std::size_t bytes);
  attempt<slab*> new_slab(stream_state& st, std::uint32_t cls);
  // Carves `size` bytes for `requested` from `arena` and backs them with
  // pages, walking the shortage chain when pages are short. A request
  // repeating `counterpart` (step_replay) goes where the earlier steps'
  // layout says first (step_placement.cpp).
  attempt<block_map::iterator> place(stream_state& st, stream_arena& arena, std::size_t size,
                                     std::size_t requested,
                                     std::size_t counterpart = step_replay::none);
  // step_placement.cpp: the request, repeating `counterpart`, allocated
  // where it was in an earlier step if that range is free and mapped, or
  // repaired there (repair_by_step); nullopt otherwise (first fit decides
  // then).
  std::optional<block_map::iterator> place_by_step(stream_state& st, stream_arena& arena,
                                                   std::size_t size, std::size_t requested,
                                                   std::size_t counterpart);
  // The earlier steps' range that maps the fewest pages when repaired
  // (page_supply::repair_cost), repaired and allocated, when first fit would
  // map at least twice as many; nullopt otherwise or when the repair fails.
  std::optional<block_map::iterator> repair_by_step(stream_state& st, stream_arena& arena,
                                                    std::size_t size, std::size_t requested,
                                                    std::size_t counterpart);
  // Marks free block `it` of `arena` allocated with `size` bytes for
  // `requested` and its pages live.
  block_map::iterator take(stream_arena& arena, block_map::iterator it, std::size_t size,
                           std::size_t requested);
  status defer_free(const located& where, stream_handle free_stream, bool device_wide);
  void finish_free(stream_state& st, stream_arena& arena, std::uintptr_t addr);
  // The same for a block of a large arena already found (`it`, in use):
  // no second lookup by address.
  void finish_free_block(stream_state& st, stream_arena& arena, block_map::iterator it);
  static void unlink_slab(stream_state& st, slab& s);
  void destroy_slab(stream_state& st, stream_arena& arena, slab& s);
  // Destroys every slab with no live object; returns how many.
  std::size_t drop_empty_slabs();
  static void link_slab(stream_state& st, slab& s);
  void count_free_request(const located& where);
  // Counts a call that took the lock (num_locked_calls) and its wall time
  // since `start`, taken before the lock (locked_call_ns). Call holding the
  // lock. Cost: one clock read.
  void count_locked_call(std::chrono::steady_clock::time_point start);

  // The parts, in the order they are built (and destroyed in reverse).
  spin_mutex mu_;  // serializes everything but the fast path
  std::unique_ptr<device> dev_;
  allocator_options options_;
  std::size_t total_;  // device memory, bytes
  size_classes classes_;
  event_pool events_;
  allocator_stats stats_;
  event_trace trace_;
  stream_table streams_;                 // the streams, their arenas and slabs
  page_supply pages_;                    // the pages: pool, stitcher, creation, release
  deferred_frees frees_;                 // frees waiting on events; recorded streams
  std::vector<pending_free> completed_;  // scratch for frees_ to hand back
  pressure_handlers handlers_;
  stats_sources sources_;
  std::optional<oom_report> last_oom_;
  std::int64_t allocated_peak_ = 0;  // allocated_bytes.all.peak as reported
  cache_binding caches_;             // destroyed first: no thread cache comes back
};

}  // namespace strata
