#include "page_supply.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

namespace strata {

namespace {

stat_pool pool_of(pool_kind k) {
  return k == pool_kind::small ? pool_small : pool_large;
}

}  // namespace

page_supply::~page_supply() {
  std::vector<std::uint32_t> held;
  table_.for_each_run([&](std::uint32_t slot) { held.push_back(slot); });
  for (std::uint32_t slot : held) {
    const std::uint32_t lead = table_.run_pages(slot).front();
    const std::size_t bytes = table_.run_pages(slot).size() * granularity_;
    for (const page_mapping& m : std::vector<page_mapping>(table_.mappings(lead))) {
      (void)dev_.unmap(m.arena->page_addr(m.index), bytes);
    }
    (void)dev_.release_pages(table_.run_handle(slot));
  }
}

void page_supply::count_kind(std::uint32_t id, int sign) {
  if (counted_kind_.size() <= id) counted_kind_.resize(id + 1, -1);
  std::int8_t& kind = counted_kind_[id];
  if (sign > 0) {
    const auto k = static_cast<std::size_t>(table_.mappings(id).front().arena->kind());
    kind = static_cast<std::int8_t>(k);
    ++kind_pages_[k];
    stats_.segment[pool_of(static_cast<pool_kind>(k))].increase(1);
    stats_.reserved_bytes[pool_of(static_cast<pool_kind>(k))].increase(
        static_cast<std::int64_t>(granularity_));
  } else if (kind >= 0) {
    const auto k = static_cast<std::size_t>(static_cast<unsigned char>(kind));
    --kind_pages_[k];
    stats_.segment[pool_of(static_cast<pool_kind>(k))].decrease(1);
    stats_.reserved_bytes[pool_of(static_cast<pool_kind>(k))].decrease(
        static_cast<std::int64_t>(granularity_));
    kind = -1;
  }
}

void page_supply::record_mapping(std::uint32_t id, stream_arena& arena, std::size_t index) {
  table_.add_mapping(id, arena, index);
  if (table_.mappings(id).size() == 1) count_kind(id, +1);
}

std::size_t page_supply::run_placement::room(std::size_t count) {
  while (open_from < pages.size() && pages[open_from] != page_table::none) ++open_from;
  std::size_t open = 0;
  for (std::size_t k = open_from; k < pages.size(); ++k) {
    if (pages[k] != page_table::none ||
        (count > 1 && (needed[k] == shared[0] || needed[k] == shared[1]))) {
      open = 0;
      continue;
    }
    open = open > 0 && needed[k] == needed[k - 1] + 1 ? open + 1 : 1;
    if (open == count) return k + 1 - count;
  }
  return pages.size();
}

void page_supply::run_placement::put(const std::vector<std::uint32_t>& run, std::size_t k) {
  for (std::size_t j = 0; j < run.size(); ++j) pages[k + j] = run[j];
  filled += run.size();
}

void page_supply::pool_run(std::uint32_t slot) {
  pool_.push_back(slot);
  pool_pages_ += table_.run_pages(slot).size();
}

void page_supply::pool_unmapped(const std::vector<std::uint32_t>& pages, std::size_t from) {
  for (std::size_t k = from; k < pages.size(); ++k) {
    const std::uint32_t id = pages[k];
    if (id != page_table::none && table_.place_in_run(id) == 0 && table_.mappings(id).empty())
      pool_run(table_.run_of(id));
  }
}

std::uint32_t page_supply::unpool_at(std::size_t k) {
  const std::uint32_t slot = pool_[k];
  pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(k));
  pool_pages_ -= table_.run_pages(slot).size();
  return slot;
}

status page_supply::back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                               bool may_create, bool may_stitch) {
  const std::size_t first = arena.page_of(addr);
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  std::size_t i = arena.next_unmapped(first, last);
  if (i == last) return {};  // every page is already there
  run_placement place;
  for (; i < last; i = arena.next_unmapped(i + 1, last)) place.needed.push_back(i);
  place.pages.assign(place.needed.size(), page_table::none);
  if (addr % granularity_ != 0) place.shared[0] = first;
  if ((addr + bytes) % granularity_ != 0) place.shared[1] = last - 1;
  const std::size_t n = place.needed.size();
  // Pool runs first, the longer ones first (a one-page run fits anywhere).
  for (const bool longer : {true, false}) {
    for (std::size_t k = pool_.size(); k > 0 && place.filled < n; --k) {
      const std::uint32_t slot = pool_[k - 1];
      const std::size_t count = table_.run_pages(slot).size();
      if ((count > 1) != longer) continue;
      const std::size_t at = place.room(count);
      if (at == n) continue;
      place.put(table_.run_pages(unpool_at(k - 1)), at);
    }
  }
  const std::size_t stitched =
      may_stitch && place.filled < n ? stitch_idle(arena, addr, bytes, place) : 0;
  status created;
  if (place.filled < n && may_create) created = create_runs(place);
  if (place.filled < n) {
    pool_unmapped(place.pages, 0);
    if (!created.ok() && created.code() != errc::out_of_memory) return created;
    return {errc::out_of_memory, "no idle page to back the request"};
  }
  if (auto s = map_pages(arena, place.needed, place.pages); !s) return s;
  if (stitched > 0) {
    arena.blocks().fence_at(addr);
    if (addr + bytes < arena.base() + arena.bytes()) arena.blocks().fence_at(addr + bytes);
    ++stats_.num_stitches;
    stats_.stitched_bytes += static_cast<std::int64_t>(stitched * granularity_);
    if (trace_.on())
      trace_.record(trace_action::stitch, addr, stitched * granularity_, arena.stream().native);
  }
  return {};
}

std::size_t page_supply::stitch_idle(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                                     run_placement& place) {
  if (table_.idle_count() == 0) return 0;
  for (stream_arena* a : streams_.arenas()) (void)a->poll(dev_, events_);  // fewer on failure
  const std::size_t first = arena.page_of(addr);
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  // Idle pages mapped elsewhere are mapped here too (a stitch), oldest idle
  // first. The range becomes a segment of its own, fenced off on both
  // sides, and a page is mapped at most once in a segment, or one block
  // could one day span two mappings of it: so a page may back index k only
  // if it is mapped nowhere in the segments index k will belong to (an
  // edge page the range shares with a neighbour belongs to the
  // neighbour's too). The pages of every segment that shares an unaligned
  // edge page with the range: from the start of the segment holding the
  // first page's first byte, to the end of the one holding the last page's
  // last byte. Segments may be shorter than a page, so more than one may
  // share it, and a fence may already stand at the range's edge.
  const std::size_t before = arena.page_of(arena.blocks().prev_fence(arena.page_addr(first)));
  const std::size_t after =
      arena.page_of(arena.blocks().next_fence(arena.page_addr(last) - 1) - 1) + 1;
  const auto span = [&](std::size_t k) {
    std::pair<std::size_t, std::size_t> r{first, last};
    if (k == r.first && addr % granularity_ != 0) r.first = before;
    if (k == r.second - 1 && (addr + bytes) % granularity_ != 0) r.second = after;
    return r;
  };
  const auto mapped_within = [&](std::uint32_t id, std::size_t lo, std::size_t hi) {
    const auto& maps = table_.mappings(id);
    return std::any_of(maps.begin(), maps.end(), [&](const page_mapping& m) {
      return m.arena == &arena && m.index >= lo && m.index < hi;
    });
  };
  // A one-page run backs the first index it does not clash with. Indices
  // 1 .. n-2 are interior (neither the range's first page nor its last),
  // so they share one span and fill in order: only index 0, the first
  // open interior index and index n-1 need a check (O(idle pages), not
  // O(idle pages x needed)). A longer run moves whole: it needs as many
  // adjacent open indices, and none of its pages may be mapped anywhere
  // in the segments the range touches.
  std::vector<std::uint32_t>& pages = place.pages;
  const std::size_t n = pages.size();
  std::size_t mid = 1;
  std::size_t stitched = 0;
  ++stamp_;
  // Nothing below changes the table: the idle list is walked in place.
  for (std::uint32_t id = table_.first_idle(); id != page_table::none && place.filled < n;
       id = table_.next_idle(id)) {
    const std::uint32_t slot = table_.run_of(id);
    const auto& run = table_.run_pages(slot);
    if (run.size() > 1) {
      if (run_stamp_.size() <= slot) run_stamp_.resize(slot + 1, 0);
      if (run_stamp_[slot] == stamp_) continue;  // met at another of its pages
      run_stamp_[slot] = stamp_;
      // It never backs a shared edge page (run_placement), so its pages'
      // segment is the range's own.
      const bool movable = std::all_of(run.begin(), run.end(), [&](std::uint32_t p) {
        return table_.usable_in(p, arena) && !mapped_within(p, first, last);
      });
      const std::size_t at = movable ? place.room(run.size()) : n;
      if (at == n) continue;
      place.put(run, at);
      stitched += run.size();
      continue;
    }
    if (!table_.usable_in(id, arena)) continue;
    const auto take = [&](std::size_t k) {
      if (pages[k] != page_table::none) return false;
      const auto fence = span(place.needed[k]);  // [first, second): its segments' pages
      if (mapped_within(id, fence.first, fence.second)) return false;
      place.put(run, k);
      return true;
    };
    while (mid + 1 < n && pages[mid] != page_table::none) ++mid;
    if (take(0) || (mid + 1 < n && take(mid)) || take(n - 1)) ++stitched;
  }
  return stitched;
}

status page_supply::create_runs(run_placement& place) {
  // Each stretch of adjacent open indices gets runs of at most
  // max_run_pages_ pages: one create, one map and one set_access a run,
  // whatever its length.
  const std::size_t n = place.needed.size();
  for (std::size_t k = 0; k < n;) {
    if (place.pages[k] != page_table::none) {
      ++k;
      continue;
    }
    const auto shared = [&](std::size_t j) {
      return place.needed[j] == place.shared[0] || place.needed[j] == place.shared[1];
    };
    std::size_t end = k + 1;
    while (!shared(k) && end < n && end - k < max_run_pages_ &&
           place.pages[end] == page_table::none && !shared(end) &&
           place.needed[end] == place.needed[end - 1] + 1) {
      ++end;
    }
    std::size_t count = end - k;
    const std::size_t room = limit_ / granularity_ - std::min(limit_ / granularity_, table_.size());
    count = std::min(count, room);
    if (count == 0) return {errc::out_of_memory, "the allocator holds its limit"};
    auto run = dev_.create_pages(count * granularity_);
    if (!run) return run.error();
    ++stats_.num_device_alloc;
    stats_.segment[pool_all].increase(static_cast<std::int64_t>(count));
    stats_.reserved_bytes[pool_all].increase(static_cast<std::int64_t>(count * granularity_));
    place.put(table_.run_pages(table_.add_run(*run, count)), k);
    k += count;
  }
  return {};
}

status page_supply::map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                              const std::vector<std::uint32_t>& pages) {
  // One map call per run (a run maps only whole), one set_access per
  // stretch of adjacent indices (the device allows whole mappings).
  const std::size_t g = granularity_;
  for (std::size_t j = 0; j < indices.size();) {
    std::size_t end = j + 1;
    while (end < indices.size() && indices[end] == indices[end - 1] + 1) ++end;
    const std::uintptr_t va = arena.page_addr(indices[j]);
    std::size_t k = j;
    status s;
    while (k < end) {
      const std::uint32_t slot = table_.run_of(pages[k]);
      const std::size_t count = table_.run_pages(slot).size();
      s = dev_.map(arena.page_addr(indices[k]), count * g, table_.run_handle(slot));
      if (!s.ok()) break;
      k += count;
    }
    if (s.ok()) s = dev_.set_access(va, (end - j) * g);
    if (!s.ok()) {
      // Nothing is lost: this stretch's runs are unmapped again; a run that
      // will not unmap stays mapped (and recorded) under free space here.
      // Runs mapped nowhere go to the pool; idle pages mapped elsewhere
      // simply stay there. Earlier stretches stay mapped.
      for (std::size_t m = j; m < k;) {
        const std::size_t count = table_.run_pages(table_.run_of(pages[m])).size();
        if (!dev_.unmap(arena.page_addr(indices[m]), count * g)) {
          for (std::size_t q = m; q < m + count; ++q) record_mapping(pages[q], arena, indices[q]);
        }
        m += count;
      }
      pool_unmapped(pages, j);
      refresh_derived_stats();
      return s;
    }
    for (std::size_t m = j; m < end; ++m) record_mapping(pages[m], arena, indices[m]);
    if (trace_.on())
      trace_.record(trace_action::segment_map, va, (end - j) * g, arena.stream().native);
    j = end;
  }
  refresh_derived_stats();
  return {};
}

void page_supply::settle() {
  if (!table_.unsettled()) return;
  for (stream_arena* a : streams_.arenas()) (void)a->poll_if_due(dev_, events_);
  table_.settle();
}

bool page_supply::waiting_on_epochs() {
  if (table_.unsettled()) return true;
  for (stream_arena* a : streams_.arenas()) (void)a->poll(dev_, events_);
  for (std::uint32_t id = table_.first_idle(); id != page_table::none; id = table_.next_idle(id)) {
    if (table_.epoch_pending(id)) return true;
  }
  return false;
}

bool page_supply::unused_at(stream_arena& arena, std::size_t index) {
  // Wholly inside a free or shadow block (a free block's edge pages may
  // hold a neighbour's bytes), idle or live at another mapping, and its
  // work here done.
  const std::uintptr_t va = arena.page_addr(index);
  const auto b = arena.blocks().find_containing(va);
  if (b == arena.blocks().end() || b->first + b->second.size < va + granularity_) return false;
  const block_state state = b->second.state;
  if (state != block_state::free && state != block_state::shadow) return false;
  return (state == block_state::shadow || table_.idle(arena.page(index))) && arena.page_idle(index);
}

bool page_supply::run_unused_at(stream_arena& arena, std::size_t index) {
  const std::uint32_t id = arena.page(index);
  const std::size_t lead = index - table_.place_in_run(id);
  const std::size_t count = table_.run_pages(table_.run_of(id)).size();
  for (std::size_t j = lead; j < lead + count; ++j) {
    if (!unused_at(arena, j)) return false;
  }
  return true;
}

std::size_t page_supply::unmap_unused(stream_arena& arena) {
  // Unmapping needs the arena's stream past every free: wait for it (the
  // address space runs out rarely; this is the only wait it costs).
  (void)arena.wait_idle(arena.open_epoch(), dev_, events_);
  const std::size_t g = granularity_;
  // The mapped pages wholly inside free or shadow blocks; a run goes when
  // every page of it here is unused (run_unused_at).
  std::vector<std::size_t> unused;
  for (auto it = arena.blocks().begin(); it != arena.blocks().end(); ++it) {
    const block_state state = it->second.state;
    if (state != block_state::free && state != block_state::shadow) continue;
    const std::size_t from = arena.page_of(it->first + g - 1);
    const std::size_t to = arena.page_of(it->first + it->second.size);
    for (std::size_t i = arena.next_mapped(from, to); i < to; i = arena.next_mapped(i + 1, to)) {
      unused.push_back(i);
    }
  }
  std::size_t unmapped = 0;
  for (const std::size_t i : unused) {
    if (arena.page(i) == stream_arena::unmapped || !run_unused_at(arena, i)) continue;
    const std::size_t count = table_.run_pages(table_.run_of(arena.page(i))).size();
    if (unmap_run_at(arena, i)) unmapped += count;
  }
  drop_fences(arena);
  refresh_derived_stats();
  return unmapped;
}

status page_supply::unmap_run_at(stream_arena& arena, std::size_t index) {
  const std::uint32_t slot = table_.run_of(arena.page(index));
  const std::vector<std::uint32_t>& run = table_.run_pages(slot);
  const std::size_t lead = index - table_.place_in_run(arena.page(index));
  const std::uintptr_t va = arena.page_addr(lead);
  const std::size_t bytes = run.size() * granularity_;
  if (auto s = dev_.unmap(va, bytes); !s) return s;
  block_map& blocks = arena.blocks();
  for (std::size_t j = 0; j < run.size(); ++j) {
    table_.remove_mapping(arena, lead + j);  // a shadow there becomes free space first
    if (table_.mappings(run[j]).empty()) count_kind(run[j], -1);
  }
  // Every free block on the run loses `mapped`: a page an unaligned fence
  // splits lies under two.
  for (auto it = blocks.find_containing(va); it != blocks.end() && it->first < va + bytes; ++it) {
    if (it->second.state == block_state::free) blocks.set_mapped(it, false);
  }
  if (table_.mappings(run.front()).empty()) pool_run(slot);
  if (trace_.on()) trace_.record(trace_action::segment_unmap, va, bytes, arena.stream().native);
  return {};
}

bool page_supply::unmap_everywhere(std::uint32_t slot) {
  const std::vector<std::uint32_t>& run = table_.run_pages(slot);
  for (const std::uint32_t id : run) {
    if (!table_.idle(id)) return false;
    for (const page_mapping& m : table_.mappings(id)) {
      if (m.shadowed || !m.arena->page_idle(m.index)) return false;
    }
  }
  // The lead's mappings are the run's; the last unmap pools it.
  const std::vector<page_mapping> maps = table_.mappings(run.front());
  return std::all_of(maps.begin(), maps.end(),
                     [&](const page_mapping& m) { return unmap_run_at(*m.arena, m.index).ok(); });
}

status page_supply::release_idle(std::size_t keep_bytes) {
  // Idle runs still mapped move to the pool first, so the pool holds
  // every idle run that can go; the pages beyond `keep_bytes` go back,
  // a whole run at a time.
  for (stream_arena* a : streams_.arenas()) (void)a->poll(dev_, events_);
  table_.settle();
  for (std::uint32_t id : table_.idle_pages()) {
    if (!table_.mappings(id).empty()) (void)unmap_everywhere(table_.run_of(id));
  }
  const std::size_t keep_pages = keep_bytes / granularity_;
  while (pool_pages_ > keep_pages) {
    const std::uint32_t slot = pool_.back();
    const auto count = static_cast<std::int64_t>(table_.run_pages(slot).size());
    if (auto s = dev_.release_pages(table_.run_handle(slot)); !s) return s;
    (void)unpool_at(pool_.size() - 1);
    (void)table_.remove_run(slot);
    ++stats_.num_device_free;
    stats_.segment[pool_all].decrease(count);
    stats_.reserved_bytes[pool_all].decrease(count * static_cast<std::int64_t>(granularity_));
  }
  refresh_derived_stats();
  return {};
}

void page_supply::release_above(std::uint64_t threshold) {
  if (threshold == std::numeric_limits<std::uint64_t>::max()) return;
  const std::size_t idle = idle_pages() * granularity_;
  if (idle <= threshold) return;
  // Close the open epochs so the pages freed in them become idle once their
  // streams get there; what is idle now goes back.
  for (stream_arena* a : streams_.arenas()) (void)a->seal(dev_, events_);
  (void)release_idle(threshold);
}

void page_supply::refresh_derived_stats() {
  std::array<std::int64_t, 2> free_blocks{};
  for (stream_arena* a : streams_.arenas()) {
    free_blocks[static_cast<std::size_t>(a->kind())] +=
        static_cast<std::int64_t>(a->blocks().mapped_free_blocks());
  }
  std::int64_t all_bytes = 0;
  std::int64_t all_count = 0;
  for (auto kind : {pool_kind::small, pool_kind::large}) {
    const auto k = static_cast<std::size_t>(kind);
    const stat_pool pool = pool_of(kind);
    const std::int64_t bytes = static_cast<std::int64_t>(kind_pages_[k] * granularity_) -
                               stats_.active_bytes[pool].current;
    stats_.inactive_split_bytes[pool].set(std::max<std::int64_t>(bytes, 0));
    stats_.inactive_split[pool].set(free_blocks[k]);
    all_bytes += std::max<std::int64_t>(bytes, 0);
    all_count += free_blocks[k];
  }
  stats_.inactive_split_bytes[pool_all].set(all_bytes);
  stats_.inactive_split[pool_all].set(all_count);
}

}  // namespace strata
