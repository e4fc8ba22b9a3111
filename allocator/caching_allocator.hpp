// The caching device allocator: stream-ordered, page-backed, with stats.
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
// The OOM chain (page_supply.cpp, oom_chain.cpp): a request that finds no
// backed range reclaims completed frees; stitches idle pages from holes
// anywhere into a contiguous range (unmapped there, mapped here, no copy);
// creates pages within the limit; waits for the streams that guard freed
// memory and gives up cached empty slabs and parked blocks; calls the
// registered pressure handlers (without the mutex); retries; and only then
// fails with out_of_memory and an oom_report.
//
// Fast path (a block this thread freed on the same stream: a small object in
// its thread cache, or a large block of the same rounded size in its slot):
// no lock, no system call, no heap allocation (fast_path.cpp).
//
// Thread safety: every public call may be made from any thread at any time;
// everything but the fast path is serialized by one mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "event_pool.hpp"
#include "event_trace.hpp"
#include "oom_report.hpp"
#include "size_classes.hpp"
#include "slab.hpp"
#include "spin_mutex.hpp"
#include "strata/allocator_options.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"
#include "strata/strata.hpp"
#include "stream_arena.hpp"
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
  /// The device's total memory, and what an allocation could get now: the
  /// device's free memory plus this allocator's cached bytes (reserved but
  /// not allocated), at most the limit minus what is allocated. Errors: the
  /// device's.
  result<memory_info> available_memory();

  /// Asked to free `bytes` of this allocator's device memory when a request
  /// fails; returns the bytes it freed. Called without the allocator's mutex
  /// held (it may free through this allocator), from the failing thread.
  /// A handler that throws counts as freeing nothing.
  using pressure_handler = std::function<std::size_t(std::size_t bytes)>;
  /// Registers `h`; returns its id (never 0).
  std::uint64_t add_pressure_handler(pressure_handler h);
  /// Unregisters handler `id`; invalid_argument if there is none. A call of
  /// the handler already under way finishes.
  status remove_pressure_handler(std::uint64_t id);

  device& dev() noexcept { return *dev_; }

  /// Flushes `tc` (bound to this allocator) and unbinds it. Called by the
  /// cache itself, without this allocator's mutex held.
  void release_cache(thread_cache& tc);
  [[nodiscard]] const allocator_options& options() const noexcept { return options_; }

 private:
  struct slab_list {
    slab* head = nullptr;
  };
  // Everything that belongs to one stream.
  struct stream_state {
    stream_handle stream;
    std::unique_ptr<stream_arena> small;
    std::unique_ptr<stream_arena> large;
    std::array<slab_list, size_classes::max_classes> partial{};
    std::array<std::uint32_t, size_classes::max_classes> empty_slabs{};
  };
  // A freed block waiting for events before it returns to its arena.
  struct pending_free {
    stream_state* owner;
    stream_arena* arena;
    std::uintptr_t addr;
    std::vector<event_handle> events;
  };
  struct sealed_batch {
    std::vector<pending_free> frees;
    std::vector<event_handle> events;
  };
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

  // oom_chain.cpp: the end of the OOM chain.
  result<void*> allocate_or_relieve(thread_cache& tc, std::size_t bytes, void* native_stream);
  // Takes the mutex, returns this thread's parked block, allocates; on an
  // out_of_memory from the chain, moves its report into `report`.
  result<void*> allocate_locked(thread_cache& tc, std::size_t bytes, void* native_stream,
                                std::optional<oom_report>& report);
  // Takes `tc`'s parked block back into its arena with exact stats (the
  // owner thread, under the mutex).
  void unpark(thread_cache& tc);
  [[nodiscard]] oom_report build_oom_report(std::size_t bytes, stream_handle stream);
  [[nodiscard]] std::size_t pages_needed(std::size_t bytes) const;

  // fast_path.cpp: the thread-cache paths and their bookkeeping.
  // Counts the block in `tc`'s slot lent (out) or taken back (in), in the
  // counters of its stats pool; `sign` -1 takes a count back.
  void count_slot(thread_cache& tc, thread_cache::direction d, std::size_t requested,
                  std::int64_t sign = 1) const;
  // Parks a block freed on its own stream in the calling thread's empty
  // slot (bound to `native`); false if it does not qualify.
  bool park(const located& where, void* native);
  // Takes `tc`'s parked block back into its arena (stats untouched: the
  // cache's counters net it); false if the slot held none.
  bool reclaim_parked(thread_cache& tc);
  std::size_t reclaim_parked_slots();
  // Takes a block out of its holder's slot if it is lent (live); false if it
  // is parked (the caller already freed it).
  static bool unlend(block_info& b);
  void adopt_cache(thread_cache& tc, void* native_stream);
  void flush_cache(thread_cache& tc);
  void fold_cache_counters(allocator_stats& s, const thread_cache& tc) const;

  // caching_allocator.cpp: the locked paths.
  status free_async_locked(void* ptr, void* native_stream);
  void return_to_slab(stream_state& st, stream_arena& arena, slab& s, std::uint32_t index);
  result<void*> allocate(std::size_t bytes, void* native_stream);
  result<stream_state*> state_for(void* native_stream);
  result<located> locate(void* ptr, const char* what);
  result<void*> allocate_small(stream_state& st, std::size_t bytes);
  result<void*> allocate_large(stream_state& st, std::size_t bytes);
  status new_slab(stream_state& st, std::uint32_t cls);
  // Carves `size` bytes for `requested` from `arena` and backs them with
  // pages, walking the shortage chain when pages are short.
  result<block_map::iterator> place(stream_state& st, stream_arena& arena, std::size_t size,
                                    std::size_t requested);
  void finish_free(stream_state& st, stream_arena& arena, std::uintptr_t addr);
  static void unlink_slab(stream_state& st, slab& s);
  void destroy_slab(stream_state& st, stream_arena& arena, slab& s);
  // Destroys every slab with no live object; returns how many.
  std::size_t drop_empty_slabs();
  static void link_slab(stream_state& st, slab& s);
  void count_free_request(const located& where);
  void refresh_derived_stats();
  // The stats as stats() reports them: derived values refreshed, thread
  // caches' counters folded in. Needs the mutex.
  [[nodiscard]] allocator_stats current_stats();
  [[nodiscard]] status out_of_memory(std::size_t bytes, stream_handle stream);

  // page_supply.cpp: backing blocks with pages; giving pages back.
  // Maps a page under every unmapped page of [addr, addr+bytes): idle pages
  // first, new ones only if `may_create`. out_of_memory when short.
  status back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes, bool may_create);
  std::size_t take_idle_pages(std::size_t wanted, stream_arena* first, std::vector<page_run>& out);
  status create_pages(std::size_t wanted, std::vector<page_run>& out);
  status map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                   std::vector<page_run>& pages);
  // Records `page` as mapped at arena page `index` in the arena and the stats.
  void account_mapped(stream_arena& arena, std::size_t index, page_run page);
  status release_idle(std::size_t keep_bytes);
  void maybe_release();
  // Reclaims completed frees, else waits for pending ones (and, under
  // `pressure`, gives up cached empty slabs); true if memory may have come free.
  result<bool> relieve_shortage(bool pressure);
  [[nodiscard]] bool anything_waiting();
  status wait_for_everything();

  // deferred_free.cpp: pending and device-wide frees.
  status defer_free(const located& where, stream_handle free_stream, bool device_wide);
  result<bool> reclaim_completed();
  status seal_open_batch();
  void finish_pending(pending_free& p);
  // Records one event per stream into `out`; on failure gives every event
  // back and leaves `out` empty.
  status record_events(const std::vector<stream_handle>& streams, std::vector<event_handle>& out);
  // Adds `s` to the streams device-wide frees wait for.
  void note_stream(stream_handle s);

  // allocator_report.cpp
  [[nodiscard]] std::string summary_of(const allocator_stats& st);

  spin_mutex mu_;
  std::unique_ptr<device> dev_;
  allocator_options options_;
  std::size_t granularity_;
  std::size_t total_;        // device memory, bytes
  std::size_t limit_;        // bytes the allocator may hold
  std::size_t arena_bytes_;  // virtual range reserved per arena
  size_classes classes_;
  event_pool events_;
  allocator_stats stats_;

  std::vector<page_run> idle_pages_;           // the page pool: unmapped, no queued work
  std::size_t held_pages_ = 0;                 // pages created and not released
  std::array<std::size_t, 2> mapped_bytes_{};  // by pool_kind

  std::unordered_map<void*, std::unique_ptr<stream_state>> streams_;
  std::vector<stream_arena*> arenas_;
  std::vector<stream_state*> owners_;  // owners_[i] owns arenas_[i]
  std::vector<stream_handle> seen_streams_;
  void* last_native_ = nullptr;
  stream_state* last_state_ = nullptr;
  std::size_t last_arena_ = 0;  // index of the arena the last pointer was in

  event_trace trace_;
  std::optional<oom_report> oom_candidate_;  // built by the chain; allocate_locked hands it on
  std::optional<oom_report> last_oom_;
  std::mutex handlers_mu_;  // guards handlers_ only; never held with mu_
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const pressure_handler>>> handlers_;
  std::uint64_t next_handler_ = 1;

  std::unordered_map<std::uintptr_t, std::vector<stream_handle>> recorded_streams_;
  std::atomic<bool> recorded_any_{false};  // !recorded_streams_.empty(), for the fast path
  const std::uint64_t serial_;             // this allocator's entry in the live registry
  std::vector<thread_cache*> caches_;      // thread caches bound to this allocator
  std::vector<pending_free> pending_;
  std::vector<pending_free> open_batch_;
  std::deque<sealed_batch> sealed_batches_;
};

}  // namespace strata
