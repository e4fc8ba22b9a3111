// The physical pages the allocator holds, every address each is mapped at,
// and which of those mappings holds its live bytes.
//
// Why a page has several mappings: a request that no mapped free range
// can hold is backed by idle pages from holes elsewhere (stitching). The
// pages are mapped at the new range *as well*, never moved: the old
// mappings stay, so nothing waits for queued work to unmap them, and when
// training repeats its requests next step, each finds its range still
// mapped and costs no driver call (docs/allocator.md, "Stitching").
//
// A page's live bytes are at one mapping at a time, its *active* one; its
// other mappings are *shadowed*: covered by shadow blocks of their arenas'
// block maps, so no request is placed there. When the page's last block
// there ends, the shadows go: at once in arenas of the same stream (its
// order protects the bytes), and in other streams' arenas once the epoch
// of the free is known complete (`settle`).
//
// Invariants: live > 0 exactly when active != none, and live counts the
// blocks in use (allocated, pending, slabs) overlapping the page at its
// active mapping; while live > 0 every other mapping is shadowed; an idle
// page (live == 0) with a mapping is on the idle list, in the order it
// became idle; a shadowed mapping of an idle page is in another stream's
// arena than the page's last free, whose epoch is not known complete.
// Cost: block_live/block_dead touch each page a block overlaps once, and
// carve or lift shadows in runs of adjacent pages (one block-map update per
// run, the runs built as the pages are visited). Nothing here calls the
// device.
//
// Thread safety: none; the allocator's mutex serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "strata/device.hpp"

namespace strata {

class stream_arena;

/// Where a page is mapped: page `index` of `arena`.
struct page_mapping {
  stream_arena* arena = nullptr;
  std::uint32_t index = 0;
  bool shadowed = false;
};

class page_table {
 public:
  static constexpr std::uint32_t none =
      std::numeric_limits<std::uint32_t>::max();  // = stream_arena::unmapped

  explicit page_table(std::size_t granularity) : granularity_(granularity) {}
  page_table(const page_table&) = delete;
  page_table& operator=(const page_table&) = delete;
  page_table(page_table&&) = delete;
  page_table& operator=(page_table&&) = delete;
  ~page_table() = default;

  /// Records a run just created (`pages` pages, unmapped, idle) and
  /// returns its slot; its pages' ids are run_pages(slot), in address
  /// order. A run is mapped only whole: wherever page k of it is mapped at
  /// index i, page j is mapped at index i - k + j of the same arena.
  std::uint32_t add_run(page_run run, std::size_t pages);
  /// Forgets a run none of whose pages has a mapping (being released);
  /// returns its handle.
  page_run remove_run(std::uint32_t slot);
  [[nodiscard]] page_run run_handle(std::uint32_t slot) const { return runs_[slot].handle; }
  [[nodiscard]] const std::vector<std::uint32_t>& run_pages(std::uint32_t slot) const {
    return runs_[slot].pages;
  }
  /// The run page `id` belongs to, and its place in it (0 = lowest address).
  [[nodiscard]] std::uint32_t run_of(std::uint32_t id) const { return parts_[id].slot; }
  [[nodiscard]] std::uint32_t place_in_run(std::uint32_t id) const { return parts_[id].place; }
  [[nodiscard]] const std::vector<page_mapping>& mappings(std::uint32_t id) const {
    return pages_[id].maps;
  }
  [[nodiscard]] bool idle(std::uint32_t id) const { return pages_[id].live == 0; }

  /// Records that page `id`, idle, is now mapped (and accessible) at page
  /// `index` of `arena` too; the arena records it as well.
  void add_mapping(std::uint32_t id, stream_arena& arena, std::size_t index);
  /// Records that the page mapped at `index` of `arena` is unmapped there:
  /// an idle page, or a mapping other than a live page's active one (a
  /// shadow there is lifted first); the arena forgets it too. The page goes
  /// off the idle list when it has no mapping left.
  void remove_mapping(stream_arena& arena, std::size_t index);

  /// A block [addr, addr+bytes) of `arena` became allocated (or a slab):
  /// its pages gain a live block, and pages that were idle become active
  /// here, their other mappings shadowed. Every page must be mapped here
  /// and not shadowed (the range was free).
  void block_live(stream_arena& arena, std::uintptr_t addr, std::size_t bytes);
  /// The block [addr, addr+bytes) of `arena` is free again (its pages'
  /// epochs already stamped): pages left with no live block become idle,
  /// their shadows lifted where the stream allows it.
  void block_dead(stream_arena& arena, std::uintptr_t addr, std::size_t bytes);

  /// True when the work before page `id`'s last free is not known done:
  /// other streams may not use the page yet.
  [[nodiscard]] bool epoch_pending(std::uint32_t id) const;
  /// True when page `id` is idle and may be used in `arena` now: its last
  /// free was on the arena's stream, or that free's epoch is complete.
  [[nodiscard]] bool usable_in(std::uint32_t id, const stream_arena& arena) const;
  /// Lifts the shadows of idle pages whose last free's epoch is now
  /// complete (the caller polled the arenas).
  void settle();
  /// True while some idle page still has shadows waiting on an epoch.
  [[nodiscard]] bool unsettled() const noexcept { return !unsettled_.empty(); }

  /// The idle pages, oldest idle first (a copy: the caller may change the
  /// table while walking it).
  [[nodiscard]] std::vector<std::uint32_t> idle_pages() const;
  /// The oldest idle page and the one after `id` (none at the end), to
  /// walk the idle list without a copy while nothing changes the table.
  [[nodiscard]] std::uint32_t first_idle() const noexcept { return idle_head_; }
  [[nodiscard]] std::uint32_t next_idle(std::uint32_t id) const noexcept { return pages_[id].next; }
  [[nodiscard]] std::size_t idle_count() const noexcept { return idle_count_; }
  /// Pages held (created and not yet removed).
  [[nodiscard]] std::size_t size() const noexcept { return pages_.size() - free_ids_.size(); }
  /// Calls `f(slot)` for every run held.
  template <class F>
  void for_each_run(F f) const {
    for (std::uint32_t slot = 0; slot < runs_.size(); ++slot) {
      if (!runs_[slot].pages.empty()) f(slot);
    }
  }

 private:
  // What block_live/block_dead touch, in one cache line a page (the page
  // runs, needed only to map and release, are apart in parts_ and runs_;
  // unaligned, a page straddled two lines and every walk missed twice).
  struct alignas(64) page {
    std::vector<page_mapping> maps;
    std::uint32_t live = 0;
    std::uint32_t active = none;       // index into maps while live > 0
    stream_arena* freed_in = nullptr;  // where its last block ended, and the epoch then
    std::uint64_t freed_epoch = 0;
    std::uint32_t prev = none;  // the idle list
    std::uint32_t next = none;
    bool listed = false;
    bool held = false;
    bool unsettled = false;  // on unsettled_
  };
  // A run of adjacent pages of one arena to shadow or unshadow.
  struct shadow_run {
    stream_arena* arena;
    std::uint32_t first;
    std::uint32_t count;
  };

  void list_idle(std::uint32_t id);
  void unlist_idle(std::uint32_t id);
  static std::uint32_t mapping_at(const page& p, const stream_arena& arena, std::size_t index);
  // Adds page `index` of `arena` to `runs`, extending one of the last
  // `runs_looked_back` runs where it continues it (no sort: adjacent runs
  // left apart cost one more block-map update, nothing else).
  static constexpr std::size_t runs_looked_back = 8;
  static void mark(std::vector<shadow_run>& runs, stream_arena* arena, std::uint32_t index);
  // Carves (`on`) or lifts the shadows of `runs`, then empties it.
  void apply(std::vector<shadow_run>& runs, bool on) const;
  // Marks unshadowed the mappings page `id` (idle) may lose its shadows at
  // now and appends them to `out` for apply(); true when none is left.
  bool lift_shadows(std::uint32_t id, std::vector<shadow_run>& out);

  std::size_t granularity_;
  static_assert(sizeof(page) == 64, "a page is one cache line");
  std::vector<page> pages_;
  struct run_part {
    std::uint32_t slot = none;
    std::uint32_t place = 0;
  };
  struct run_entry {
    page_run handle;
    std::vector<std::uint32_t> pages;  // empty: a free slot
  };
  std::vector<run_part> parts_;  // by page id, beside pages_
  std::vector<run_entry> runs_;  // by slot
  std::vector<std::uint32_t> free_ids_;
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t idle_head_ = none;
  std::uint32_t idle_tail_ = none;
  std::size_t idle_count_ = 0;
  std::vector<std::uint32_t> unsettled_;  // idle pages with shadows waiting on an epoch
  std::vector<shadow_run> scratch_;       // reused by block_live/block_dead
};

}  // namespace strata
