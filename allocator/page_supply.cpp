#include "page_supply.hpp"

#include <algorithm>
#include <limits>
namespace strata {

page_supply::~page_supply() {
  for (auto run : idle_pages_) (void)dev_.release_pages(run);
}

namespace {

stat_pool pool_of(pool_kind k) {
  return k == pool_kind::small ? pool_small : pool_large;
}

}  // namespace

status page_supply::back_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                               bool may_create) {
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  std::size_t i = arena.next_unmapped(arena.page_of(addr), last);
  if (i == last) return {};  // every page is already there
  std::vector<std::size_t> needed;
  for (; i < last; i = arena.next_unmapped(i + 1, last)) needed.push_back(i);
  std::vector<page_run> pages;
  pages.reserve(needed.size());
  while (pages.size() < needed.size() && !idle_pages_.empty()) {
    pages.push_back(idle_pages_.back());
    idle_pages_.pop_back();
  }
  std::size_t stitched = 0;  // pages moved here from holes elsewhere
  if (pages.size() < needed.size()) {
    stitched = take_idle_pages(needed.size() - pages.size(), &arena, pages);
  }
  status created;
  if (pages.size() < needed.size() && may_create) {
    created = create_pages(needed.size() - pages.size(), pages);
  }
  if (pages.size() < needed.size()) {
    idle_pages_.insert(idle_pages_.end(), pages.begin(), pages.end());
    if (!created.ok() && created.code() != errc::out_of_memory) return created;
    return {errc::out_of_memory, "no idle page to back the request"};
  }
  if (auto s = map_pages(arena, needed, pages); !s) return s;
  if (stitched > 0) {
    ++stats_.num_stitches;
    stats_.stitched_bytes += static_cast<std::int64_t>(stitched * granularity_);
    if (trace_.on())
      trace_.record(trace_action::stitch, addr, stitched * granularity_, arena.stream().native);
  }
  return {};
}

std::size_t page_supply::take_idle_pages(std::size_t wanted, stream_arena* first,
                                         std::vector<page_run>& out) {
  const std::size_t start = out.size();
  const auto steal_from = [&](stream_arena& a) {
    (void)a.poll(dev_, events_);  // a failed query only means fewer idle pages
    const std::size_t g = granularity_;
    for (auto it = a.blocks().begin(); it != a.blocks().end() && out.size() - start < wanted;
         ++it) {
      const block_info& b = it->second;
      if (b.state != block_state::free) continue;
      const std::size_t from = (it->first - a.base() + g - 1) / g;
      const std::size_t to = (it->first + b.size - a.base()) / g;
      bool took = false;
      for (std::size_t i = a.next_mapped(from, to); i < to && out.size() - start < wanted;
           i = a.next_mapped(i + 1, to)) {
        const page_run run = a.page(i);
        if (!a.page_idle(i) || !dev_.unmap(a.page_addr(i), g)) continue;
        a.set_page(i, {});
        if (trace_.on()) {
          trace_.record(trace_action::segment_unmap, a.page_addr(i), g, a.stream().native);
        }
        mapped_bytes_[static_cast<std::size_t>(a.kind())] -= g;
        stats_.segment[pool_of(a.kind())].decrease(1);
        stats_.reserved_bytes[pool_of(a.kind())].decrease(static_cast<std::int64_t>(g));
        out.push_back(run);
        took = true;
      }
      if (took) a.blocks().set_mapped(it, false);
    }
  };
  if (first != nullptr) steal_from(*first);
  for (stream_arena* a : streams_.arenas()) {
    if (a != first && out.size() - start < wanted) steal_from(*a);
  }
  return out.size() - start;
}

status page_supply::create_pages(std::size_t wanted, std::vector<page_run>& out) {
  for (std::size_t n = 0; n < wanted; ++n) {
    if ((held_pages_ + 1) * granularity_ > limit_) {
      return {errc::out_of_memory, "the allocator holds its limit"};
    }
    auto run = dev_.create_pages(granularity_);
    if (!run) return run.error();
    ++held_pages_;
    ++stats_.num_device_alloc;
    stats_.segment[pool_all].increase(1);
    stats_.reserved_bytes[pool_all].increase(static_cast<std::int64_t>(granularity_));
    out.push_back(*run);
  }
  return {};
}

status page_supply::map_pages(stream_arena& arena, const std::vector<std::size_t>& indices,
                              std::vector<page_run>& pages) {
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
      s = dev_.map(arena.page_addr(indices[k]), g, pages[k], 0);
      if (!s.ok()) break;
    }
    if (s.ok()) s = dev_.set_access(va, (end - j) * g);
    if (!s.ok()) {
      // Nothing is lost: this run's pages are unmapped again and, with the
      // unused ones, return to the pool; a page that will not unmap stays
      // mapped (and accounted) under what is now free space; earlier runs
      // stay mapped too.
      for (std::size_t m = j; m < k; ++m) {
        if (dev_.unmap(arena.page_addr(indices[m]), g)) {
          idle_pages_.push_back(pages[m]);
        } else {
          account_mapped(arena, indices[m], pages[m]);
        }
      }
      idle_pages_.insert(idle_pages_.end(), pages.begin() + static_cast<std::ptrdiff_t>(k),
                         pages.end());
      refresh_derived_stats();
      return s;
    }
    for (std::size_t m = j; m < end; ++m) account_mapped(arena, indices[m], pages[m]);
    if (trace_.on())
      trace_.record(trace_action::segment_map, va, (end - j) * g, arena.stream().native);
    j = end;
  }
  refresh_derived_stats();
  return {};
}

void page_supply::account_mapped(stream_arena& arena, std::size_t index, page_run page) {
  arena.set_page(index, page);
  mapped_bytes_[static_cast<std::size_t>(arena.kind())] += granularity_;
  stats_.segment[pool_of(arena.kind())].increase(1);
  stats_.reserved_bytes[pool_of(arena.kind())].increase(static_cast<std::int64_t>(granularity_));
}

status page_supply::release_idle(std::size_t keep_bytes) {
  // Idle pages still mapped under free blocks move to the pool first, so the
  // pool holds every idle page; the pages beyond `keep_bytes` go back.
  take_idle_pages(static_cast<std::size_t>(-1), nullptr, idle_pages_);
  const std::size_t keep_pages = keep_bytes / granularity_;
  while (idle_pages_.size() > keep_pages) {
    if (auto s = dev_.release_pages(idle_pages_.back()); !s) return s;
    idle_pages_.pop_back();
    --held_pages_;
    ++stats_.num_device_free;
    stats_.segment[pool_all].decrease(1);
    stats_.reserved_bytes[pool_all].decrease(static_cast<std::int64_t>(granularity_));
  }
  return {};
}

void page_supply::release_above(std::uint64_t threshold) {
  if (threshold == std::numeric_limits<std::uint64_t>::max()) return;
  const auto mapped = static_cast<std::int64_t>(mapped_bytes_[0] + mapped_bytes_[1]);
  const std::int64_t unused = mapped - stats_.active_bytes[pool_all].current;
  const std::size_t idle = idle_pages_.size() * granularity_ +
                           static_cast<std::size_t>(std::max<std::int64_t>(unused, 0));
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
    const std::int64_t bytes =
        static_cast<std::int64_t>(mapped_bytes_[k]) - stats_.active_bytes[pool].current;
    stats_.inactive_split_bytes[pool].set(std::max<std::int64_t>(bytes, 0));
    stats_.inactive_split[pool].set(free_blocks[k]);
    all_bytes += std::max<std::int64_t>(bytes, 0);
    all_count += free_blocks[k];
  }
  stats_.inactive_split_bytes[pool_all].set(all_bytes);
  stats_.inactive_split[pool_all].set(all_count);
}

}  // namespace strata
