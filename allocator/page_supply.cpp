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
  table_.for_each([&](std::uint32_t id) { held.push_back(id); });
  for (std::uint32_t id : held) {
    for (const page_mapping& m : std::vector<page_mapping>(table_.mappings(id))) {
      (void)dev_.unmap(m.arena->page_addr(m.index), granularity_);
    }
    (void)dev_.release_pages(table_.run(id));
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

status page_supply::back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                               bool may_create, bool may_stitch) {
  const std::size_t first = arena.page_of(addr);
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  std::size_t i = arena.next_unmapped(first, last);
  if (i == last) return {};  // every page is already there
  std::vector<std::size_t> needed;
  for (; i < last; i = arena.next_unmapped(i + 1, last)) needed.push_back(i);
  constexpr std::uint32_t none = page_table::none;
  std::vector<std::uint32_t> pages(needed.size(), none);
  std::size_t filled = 0;
  for (std::size_t k = 0; k < needed.size() && !pool_.empty(); ++k, ++filled) {
    pages[k] = pool_.back();
    pool_.pop_back();
  }
  // Idle pages mapped elsewhere are mapped here too (a stitch), oldest idle
  // first. The range becomes a segment of its own, fenced off on both
  // sides, and a page is mapped at most once in a segment, or one block
  // could one day span two mappings of it: so a page may back index k only
  // if it is mapped nowhere in the segments index k will belong to (an
  // edge page the range shares with a neighbour belongs to the
  // neighbour's too).
  std::size_t stitched = 0;
  if (may_stitch && filled < needed.size() && table_.idle_count() > 0) {
    for (stream_arena* a : streams_.arenas()) (void)a->poll(dev_, events_);  // fewer on failure
    // The pages of every segment that shares an unaligned edge page with
    // the range: from the start of the segment holding the first page's
    // first byte, to the end of the one holding the last page's last byte.
    // Segments may be shorter than a page, so more than one may share it,
    // and a fence may already stand at the range's edge.
    const std::size_t before = arena.page_of(arena.blocks().prev_fence(arena.page_addr(first)));
    const std::size_t after =
        arena.page_of(arena.blocks().next_fence(arena.page_addr(last) - 1) - 1) + 1;
    const auto span = [&](std::size_t k) {
      std::pair<std::size_t, std::size_t> r{first, last};
      if (k == first && addr % granularity_ != 0) r.first = before;
      if (k == last - 1 && (addr + bytes) % granularity_ != 0) r.second = after;
      return r;
    };
    // Each idle page backs the first index it does not clash with. Indices
    // 1 .. n-2 are interior (neither the range's first page nor its last),
    // so they share one span and fill in order: only index 0, the first
    // open interior index and index n-1 need a check (O(idle pages), not
    // O(idle pages x needed)).
    const std::size_t n = needed.size();
    std::size_t mid = 1;
    // Nothing below changes the table: the idle list is walked in place.
    for (std::uint32_t id = table_.first_idle(); id != page_table::none && filled < n;
         id = table_.next_idle(id)) {
      if (!table_.usable_in(id, arena)) continue;
      const auto& maps = table_.mappings(id);
      const auto take = [&](std::size_t k) {
        if (pages[k] != none) return false;
        const auto fence = span(needed[k]);  // [first, second): its segments' pages
        const bool clash = std::any_of(maps.begin(), maps.end(), [&](const page_mapping& m) {
          return m.arena == &arena && m.index >= fence.first && m.index < fence.second;
        });
        if (!clash) pages[k] = id;
        return !clash;
      };
      while (mid + 1 < n && pages[mid] != none) ++mid;
      if (take(0) || (mid + 1 < n && take(mid)) || take(n - 1)) {
        ++filled;
        ++stitched;
      }
    }
  }
  status created;
  if (filled < needed.size() && may_create) {
    std::vector<std::uint32_t> fresh;
    created = create_pages(needed.size() - filled, fresh);
    for (std::size_t k = 0, f = 0; k < needed.size() && f < fresh.size(); ++k) {
      if (pages[k] == none) {
        pages[k] = fresh[f++];
        ++filled;
      }
    }
  }
  if (filled < needed.size()) {
    for (std::uint32_t id : pages) {
      if (id != none && table_.mappings(id).empty()) pool_.push_back(id);  // pool and new pages
    }
    if (!created.ok() && created.code() != errc::out_of_memory) return created;
    return {errc::out_of_memory, "no idle page to back the request"};
  }
  if (auto s = map_pages(arena, needed, pages); !s) return s;
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

status page_supply::create_pages(std::size_t wanted, std::vector<std::uint32_t>& out) {
  for (std::size_t n = 0; n < wanted; ++n) {
    if ((table_.size() + 1) * granularity_ > limit_) {
      return {errc::out_of_memory, "the allocator holds its limit"};
    }
    auto run = dev_.create_pages(granularity_);
    if (!run) return run.error();
    ++stats_.num_device_alloc;
    stats_.segment[pool_all].increase(1);
    stats_.reserved_bytes[pool_all].increase(static_cast<std::int64_t>(granularity_));
    out.push_back(table_.add(*run));
  }
  return {};
}

status page_supply::map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                              const std::vector<std::uint32_t>& pages) {
  // One map call per page (each page is its own physical allocation), one
  // set_access per run of adjacent pages (the device allows whole mappings).
  const std::size_t g = granularity_;
  for (std::size_t j = 0; j < indices.size();) {
    std::size_t end = j + 1;
    while (end < indices.size() && indices[end] == indices[end - 1] + 1) ++end;
    const std::uintptr_t va = arena.page_addr(indices[j]);
    std::size_t k = j;
    status s;
    for (; k < end; ++k) {
      s = dev_.map(arena.page_addr(indices[k]), g, table_.run(pages[k]));
      if (!s.ok()) break;
    }
    if (s.ok()) s = dev_.set_access(va, (end - j) * g);
    if (!s.ok()) {
      // Nothing is lost: this run's pages are unmapped again; a page that
      // will not unmap stays mapped (and recorded) under free space here.
      // Pages mapped nowhere go to the pool; idle pages mapped elsewhere
      // simply stay there. Earlier runs stay mapped.
      for (std::size_t m = j; m < k; ++m) {
        if (!dev_.unmap(arena.page_addr(indices[m]), g))
          record_mapping(pages[m], arena, indices[m]);
      }
      for (std::size_t m = j; m < pages.size(); ++m) {
        if (table_.mappings(pages[m]).empty()) pool_.push_back(pages[m]);
      }
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

std::size_t page_supply::unmap_unused(stream_arena& arena) {
  // Unmapping needs the arena's stream past every free: wait for it (the
  // address space runs out rarely; this is the only wait it costs).
  (void)arena.wait_idle(arena.open_epoch(), dev_, events_);
  const std::size_t g = granularity_;
  // The pages wholly inside free blocks (a free block's edge pages may hold
  // a neighbour's bytes) that no block uses, and the shadowed ones (live at
  // another mapping, unused here), whose work here is done.
  std::vector<std::size_t> unused;
  for (auto it = arena.blocks().begin(); it != arena.blocks().end(); ++it) {
    const block_state state = it->second.state;
    if (state != block_state::free && state != block_state::shadow) continue;
    const std::size_t from = arena.page_of(it->first + g - 1);
    const std::size_t to = arena.page_of(it->first + it->second.size);
    for (std::size_t i = arena.next_mapped(from, to); i < to; i = arena.next_mapped(i + 1, to)) {
      if ((state == block_state::shadow || table_.idle(arena.page(i))) && arena.page_idle(i)) {
        unused.push_back(i);
      }
    }
  }
  std::size_t unmapped = 0;
  for (const std::size_t i : unused) {
    if (unmap_at(arena, i)) ++unmapped;
  }
  drop_fences(arena);
  refresh_derived_stats();
  return unmapped;
}

status page_supply::unmap_at(stream_arena& arena, std::size_t index) {
  const std::uintptr_t va = arena.page_addr(index);
  const std::uint32_t id = arena.page(index);
  if (auto s = dev_.unmap(va, granularity_); !s) return s;
  table_.remove_mapping(arena, index);  // a shadow there becomes free space first
  // Every free block on the page loses `mapped`: a page an unaligned fence
  // splits lies under two.
  block_map& blocks = arena.blocks();
  for (auto it = blocks.find_containing(va); it != blocks.end() && it->first < va + granularity_;
       ++it) {
    if (it->second.state == block_state::free) blocks.set_mapped(it, false);
  }
  if (table_.mappings(id).empty()) {
    count_kind(id, -1);
    pool_.push_back(id);
  }
  if (trace_.on())
    trace_.record(trace_action::segment_unmap, va, granularity_, arena.stream().native);
  return {};
}

bool page_supply::unmap_everywhere(std::uint32_t id) {
  const std::vector<page_mapping> maps = table_.mappings(id);
  for (const page_mapping& m : maps) {
    if (m.shadowed || !m.arena->page_idle(m.index)) return false;
  }
  // The last unmap pools the page.
  return std::all_of(maps.begin(), maps.end(),
                     [&](const page_mapping& m) { return unmap_at(*m.arena, m.index).ok(); });
}

status page_supply::release_idle(std::size_t keep_bytes) {
  // Idle pages still mapped move to the pool first, so the pool holds
  // every idle page that can go; the pages beyond `keep_bytes` go back.
  for (stream_arena* a : streams_.arenas()) (void)a->poll(dev_, events_);
  table_.settle();
  for (std::uint32_t id : table_.idle_pages()) (void)unmap_everywhere(id);
  const std::size_t keep_pages = keep_bytes / granularity_;
  while (pool_.size() > keep_pages) {
    if (auto s = dev_.release_pages(table_.run(pool_.back())); !s) return s;
    (void)table_.remove(pool_.back());
    pool_.pop_back();
    ++stats_.num_device_free;
    stats_.segment[pool_all].decrease(1);
    stats_.reserved_bytes[pool_all].decrease(static_cast<std::int64_t>(granularity_));
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
