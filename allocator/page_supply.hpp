// The page supply: the physical pages the allocator holds, and backing the
// arenas' blocks with them.
//
// Page sources, in order: the page pool (pages mapped nowhere); idle pages
// mapped elsewhere, which are mapped here too (stitching: no copy, no
// unmap, no wait; page_table keeps the one mapping with live bytes and
// shadows the others); new pages from the device, within the limit.
// Mappings are kept: a stitched range stays mapped after its block ends,
// so the same request next step finds it and costs no driver call. Pages
// are unmapped only to give them back (trim, release_threshold), to repair
// a range (a mapping there of a page live elsewhere) or when an arena's
// address space runs out, and then only once the work queued at that
// mapping is done.
//
// Pages are created in physical runs of up to `run_bytes` (one page by
// default); a run is mapped, unmapped and released only whole, so it moves
// only when every page of it is idle (a stitch maps it whole, a repair or
// trim unmaps it whole, the pool holds whole runs).
//
// Invariants: held pages = pool pages + pages with a mapping (page_table);
// held * granularity <= limit whenever a page is created (a lowered limit
// is honoured by creating no more); a page is unmapped only when the
// epochs of the frees at that mapping are complete. The supply owns the
// page counters of the stats (segment, reserved_bytes, num_device_alloc/
// free, num_stitches, stitched_bytes) and the derived inactive-split ones;
// a page counts in the small or large pool by the arena it was first
// mapped in.
// Cost: backing a range costs one map per run and one set_access per
// stretch of adjacent pages (plus one create per new run); nothing else
// here calls the device but repairs, trim and teardown.
//
// Thread safety: none; the allocator's mutex serializes calls.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "event_pool.hpp"
#include "event_trace.hpp"
#include "page_table.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"
#include "stream_arena.hpp"
#include "stream_table.hpp"

namespace strata {

class page_supply {
 public:
  // Every reference must outlive the supply. `limit` bytes may be held;
  // new pages are created in runs of up to `run_bytes` (at least a page).
  page_supply(device& dev, event_pool& events, stream_table& streams, allocator_stats& stats,
              event_trace& trace, std::size_t limit, std::size_t run_bytes)
      : dev_(dev),
        events_(events),
        streams_(streams),
        stats_(stats),
        trace_(trace),
        granularity_(dev.granularity()),
        limit_(limit),
        max_run_pages_(std::max<std::size_t>(run_bytes / dev.granularity(), 1)),
        table_(dev.granularity()) {}
  page_supply(const page_supply&) = delete;
  page_supply& operator=(const page_supply&) = delete;
  page_supply(page_supply&&) = delete;
  page_supply& operator=(page_supply&&) = delete;
  // Unmaps every page wherever it is mapped and releases it (the caller
  // has synchronized the device).
  ~page_supply();

  // Maps a page under every unmapped page of [addr, addr+bytes) of
  // `arena` (free address space starting a free block): pool pages first,
  // then idle pages usable there if `may_stitch` (a stitch: a fence then
  // starts a segment at `addr`), then new ones if `may_create`.
  // out_of_memory when short (every page taken goes back); other errors:
  // the device's, nothing lost.
  status back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes, bool may_create,
                    bool may_stitch = true);
  // Repair (page_repair.cpp): a range an earlier step's request had, free
  // now but for pages there that are live at another mapping, is made
  // whole again by unmapping those pages there and backing the holes,
  // instead of stitching a new range for the whole request.
  //
  // The pages repair_range would map under [addr, addr+bytes) of `arena`
  // (those unmapped there and those shadowed there), or nullopt when the
  // range holds a block in use, a fence inside it, or a shadowed page whose
  // work at this address may still be queued. Polls the arena's epochs (one
  // event query each) when that decides; calls the device for nothing else.
  [[nodiscard]] std::optional<std::size_t> repair_cost(stream_arena& arena, std::uintptr_t addr,
                                                       std::size_t bytes);
  // Makes [addr, addr+bytes), which repair_cost priced, free address space
  // backed by pages idle here: the shadowed pages are unmapped there (one
  // unmap each), then the range is backed as back_range backs it (with
  // `may_stitch` false: by pool or new pages only, mapped nowhere else).
  // Errors: the device's, or out_of_memory from back_range; the range is
  // then left free with holes, every page still held and recorded.
  status repair_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes, bool may_create,
                      bool may_stitch);
  // Makes [addr, addr+bytes) of `arena`, free address space split by
  // fences, one free block: lifts each fence inside it that no page is
  // mapped on both sides of (fence_lift.cpp). True when none is left
  // inside; false, lifting nothing, when a block in the range is not free.
  // No device call. Cost: the pages mapped in the segments on either side
  // of each fence, sorted.
  bool lift_fences_in(stream_arena& arena, std::uintptr_t addr, std::size_t bytes);
  // Waits for the work queued on `arena`'s stream, then unmaps there every
  // page no block uses (pages left with no mapping go to the pool), and
  // lifts the fences no page is mapped on both sides of. Returns how many
  // it unmapped. For when the arena's address space runs out.
  std::size_t unmap_unused(stream_arena& arena);
  // A block of `arena` came into use / went out of use (see page_table).
  void block_live(stream_arena& arena, std::uintptr_t addr, std::size_t bytes) {
    table_.block_live(arena, addr, bytes);
  }
  void block_dead(stream_arena& arena, std::uintptr_t addr, std::size_t bytes) {
    table_.block_dead(arena, addr, bytes);
  }
  // Polls the arenas' epochs (each at most once per
  // stream_arena::epoch_interval_s while its event is unfinished) and lifts
  // the shadows they now allow.
  void settle();
  // True when idle pages wait on another stream's epoch before they can
  // be used (or their shadows lifted): waiting for the streams may help.
  [[nodiscard]] bool waiting_on_epochs();
  // Unmaps every idle page whose work is done from all its mappings, then
  // returns pool pages to the device until at most `keep_bytes` of them
  // remain. Errors: the device's.
  status release_idle(std::size_t keep_bytes);
  // If more than `threshold` bytes are idle (pooled, or mapped and not
  // active), seals the arenas' open epochs and releases what is idle now
  // down to `threshold`. Best effort: a failing device call keeps pages.
  void release_above(std::uint64_t threshold);
  // Recomputes the stats' inactive-split counters from the pages held and
  // the arenas' free blocks.
  void refresh_derived_stats();

  void set_limit(std::size_t bytes) noexcept { limit_ = bytes; }
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] std::size_t held_pages() const noexcept { return table_.size(); }
  [[nodiscard]] std::size_t pool_pages() const noexcept { return pool_pages_; }
  // Pages holding no live byte: pooled or idle where they are mapped.
  [[nodiscard]] std::size_t idle_pages() const noexcept {
    return pool_pages_ + table_.idle_count();
  }

 private:
  // Where back_range's pages go: `pages[k]` backs arena index `needed[k]`
  // (sorted); a run fills as many adjacent indices as it has pages, in
  // address order. A longer run backs only the range's own pages: an edge
  // page a neighbour's block may share (`shared`) takes a one-page run, so
  // a longer run's pages fall idle together when the request's block ends.
  struct run_placement {
    std::vector<std::size_t> needed;
    std::vector<std::uint32_t> pages;
    std::array<std::size_t, 2> shared{none_index, none_index};
    static constexpr std::size_t none_index = ~std::size_t{0};
    std::size_t filled = 0;
    std::size_t open_from = 0;  // every entry below it is filled
    // The first k where `count` open entries of adjacent indices start (for
    // count > 1, none of them shared), or pages.size() if none.
    [[nodiscard]] std::size_t room(std::size_t count);
    void put(const std::vector<std::uint32_t>& run, std::size_t k);
  };
  // Backs open entries of `place` with idle runs usable in `arena` (a
  // stitch of [addr, addr+bytes)); returns how many pages it placed.
  std::size_t stitch_idle(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                          run_placement& place);
  // Backs every open entry of `place` with new runs, within the limit.
  status create_runs(run_placement& place);
  // Maps `pages` at arena pages `indices` (sorted): one map a run, one
  // set_access per stretch of adjacent indices. On failure the runs not
  // mapped go back where they came from and the error is returned.
  status map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                   const std::vector<std::uint32_t>& pages);
  void record_mapping(std::uint32_t id, stream_arena& arena, std::size_t index);
  void pool_run(std::uint32_t slot);
  // Pools, once each, the runs of `pages` from entry `from` on that have no
  // mapping (pool and new runs a failed backing took).
  void pool_unmapped(const std::vector<std::uint32_t>& pages, std::size_t from);
  std::uint32_t unpool_at(std::size_t k);
  // True when page `index` of `arena` holds no block in use and its work
  // there is done: it may be unmapped there.
  bool unused_at(stream_arena& arena, std::size_t index);
  // True when every page of the run mapped at `index` of `arena` is.
  bool run_unused_at(stream_arena& arena, std::size_t index);
  // Unmaps, at `arena`, the whole run whose page is mapped at `index` (each
  // of its pages there unused, run_unused_at); a run left with no mapping
  // goes to the pool. Errors: the device's (the mapping is then kept).
  status unmap_run_at(stream_arena& arena, std::size_t index);
  // Unmaps run `slot` (idle, its work done) everywhere; false (and keeps
  // what did not unmap) if a page is not idle everywhere or the device
  // refuses.
  bool unmap_everywhere(std::uint32_t slot);
  void count_kind(std::uint32_t id, int sign);
  // Lifts the fences of `arena` that no page is mapped on both sides of
  // (fence_lift.cpp).
  void drop_fences(stream_arena& arena);
  // Lifts the fence at `f` of `arena` if no page is mapped on both of its
  // sides (in the two segments it separates); true if it went.
  bool lift_fence(stream_arena& arena, std::uintptr_t f);

  device& dev_;
  event_pool& events_;
  stream_table& streams_;
  allocator_stats& stats_;
  event_trace& trace_;
  std::size_t granularity_;
  std::size_t limit_;
  std::size_t max_run_pages_;
  page_table table_;
  std::vector<std::uint32_t> pool_;  // run slots mapped nowhere, with no queued work
  std::size_t pool_pages_ = 0;
  std::vector<std::uint32_t> run_stamp_;  // by run slot: stitch_idle's visit
  std::uint32_t stamp_ = 0;
  std::vector<std::int8_t> counted_kind_;    // by page id: the pool_kind it counts in, or -1
  std::array<std::size_t, 2> kind_pages_{};  // pages counted per pool_kind
};

}  // namespace strata
