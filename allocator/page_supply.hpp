// The page supply: the physical pages the allocator holds, and backing the
// arenas' blocks with them.
//
// Page sources, in order: the page pool (idle, unmapped pages); idle pages
// inside free blocks of any arena (unmapped from there and mapped here: the
// stitcher, how free memory anywhere serves a request anywhere, no copy);
// new pages from the device, within the limit.
//
// Invariants: held pages = pool pages + pages mapped in arenas;
// held * granularity <= limit whenever a page is created (a lowered limit
// is honoured by creating no more); a page is unmapped only when its arena's
// stream has finished every epoch that freed memory on it. The supply owns
// the page counters of the stats (segment, reserved_bytes,
// num_device_alloc/free, num_stitches, stitched_bytes) and the derived
// inactive-split ones.
//
// Thread safety: none; the allocator's mutex serializes calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "event_pool.hpp"
#include "event_trace.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"
#include "stream_arena.hpp"
#include "stream_table.hpp"

namespace strata {

class page_supply {
 public:
  // Every reference must outlive the supply. `limit` bytes may be held.
  page_supply(device& dev, event_pool& events, stream_table& streams, allocator_stats& stats,
              event_trace& trace, std::size_t limit)
      : dev_(dev),
        events_(events),
        streams_(streams),
        stats_(stats),
        trace_(trace),
        granularity_(dev.granularity()),
        limit_(limit) {}
  page_supply(const page_supply&) = delete;
  page_supply& operator=(const page_supply&) = delete;
  page_supply(page_supply&&) = delete;
  page_supply& operator=(page_supply&&) = delete;
  // Releases the pool's pages (pages mapped in arenas go with the stream
  // table).
  ~page_supply();

  // Maps a page under every unmapped page of [addr, addr+bytes) of `arena`:
  // pool pages first, then stitched ones, new ones only if `may_create`.
  // out_of_memory when short (every page taken goes back to the pool);
  // other errors: the device's, nothing lost.
  status back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes, bool may_create);
  // Moves every idle page to the pool, then returns pool pages to the device
  // until at most `keep_bytes` of them remain. Errors: the device's.
  status release_idle(std::size_t keep_bytes);
  // If more than `threshold` bytes are idle (pooled, or mapped and not
  // active), seals the arenas' open epochs and releases what is idle now
  // down to `threshold`. Best effort: a failing device call keeps pages.
  void release_above(std::uint64_t threshold);
  // Recomputes the stats' inactive-split counters from the mapped bytes and
  // the arenas' free blocks.
  void refresh_derived_stats();

  void set_limit(std::size_t bytes) noexcept { limit_ = bytes; }
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] std::size_t held_pages() const noexcept { return held_pages_; }
  [[nodiscard]] std::size_t pool_pages() const noexcept { return idle_pages_.size(); }

 private:
  // Unmaps up to `wanted` idle pages under free blocks, from `first` (if
  // any) then every arena, into `out`; returns how many.
  std::size_t take_idle_pages(std::size_t wanted, stream_arena* first, std::vector<page_run>& out);
  status create_pages(std::size_t wanted, std::vector<page_run>& out);
  status map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                   std::vector<page_run>& pages);
  // Records `page` as mapped at arena page `index` in the arena and the stats.
  void account_mapped(stream_arena& arena, std::size_t index, page_run page);

  device& dev_;
  event_pool& events_;
  stream_table& streams_;
  allocator_stats& stats_;
  event_trace& trace_;
  std::size_t granularity_;
  std::size_t limit_;
  std::vector<page_run> idle_pages_;           // the pool: unmapped, no queued work
  std::size_t held_pages_ = 0;                 // pages created and not released
  std::array<std::size_t, 2> mapped_bytes_{};  // by pool_kind
};

}  // namespace strata
