// Repairing a range (page_supply.hpp): an earlier step's range for a
// request, free now but for pages there whose bytes are live at another
// mapping of theirs (shadowed), is made whole by unmapping just those pages
// there and backing the holes with idle pages.
//
// Why: when training repeats a step, a request's earlier range is usually
// free again, but a few of its stitched pages may be live elsewhere this
// time (a block that outlives its step sits on them). Stitching a new range
// maps every page of the request again (a 4.6 GiB logits block: 2374 pages,
// about 72 ms of driver calls on an H100); the repair maps only the pages
// that clash (a few dozen) and keeps the request at its address, so the
// next step finds the range as this one left it.
//
// Cost: repair_cost walks the range's blocks (no device call, or one event
// query per arena when an epoch decides); repair_range costs one unmap per
// shadowed page plus back_range's map and set_access calls.
#include <algorithm>
#include <utility>

#include "page_supply.hpp"

namespace strata {

namespace {

// The pages [from, to) of shadow block `b` that lie in [first, last).
std::pair<std::size_t, std::size_t> shadowed_pages(const stream_arena& arena, block_map::iterator b,
                                                   std::size_t first, std::size_t last) {
  return {std::max(arena.page_of(b->first), first),
          std::min(arena.page_of(b->first + b->second.size - 1) + 1, last)};
}

}  // namespace

std::optional<std::size_t> page_supply::repair_cost(stream_arena& arena, std::uintptr_t addr,
                                                    std::size_t bytes) {
  const std::size_t first = arena.page_of(addr);
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  block_map& blocks = arena.blocks();
  bool polled = false;
  // A shadowed page is unmapped with its whole run: every page of the run
  // here must be unused (no block in use on it, its work here done), and
  // those inside the range become holes to back as well.
  std::size_t holes = 0;
  std::size_t covered_to = first;  // indices below it are counted
  for (auto b = blocks.find_containing(addr); b != blocks.end() && b->first < addr + bytes; ++b) {
    // A fence inside would split the range into two segments; a block in
    // use cannot move.
    if (b->second.in_use() || (b->second.fence && b->first > addr)) return std::nullopt;
    if (b->second.state != block_state::shadow) continue;
    // Shadows cover whole pages; unmapping one needs its work here done.
    const auto [from, to] = shadowed_pages(arena, b, first, last);
    for (std::size_t i = std::max(from, covered_to); i < to; i = std::max(i + 1, covered_to)) {
      if (!arena.page_idle(i) && !polled) {
        polled = true;
        (void)arena.poll(dev_, events_);  // a failed query leaves the page busy
      }
      if (!arena.page_idle(i)) return std::nullopt;
      const std::uint32_t id = arena.page(i);
      const std::size_t count = table_.run_pages(table_.run_of(id)).size();
      if (count > 1 && !run_unused_at(arena, i)) return std::nullopt;
      const std::size_t lead = i - table_.place_in_run(id);
      covered_to = std::min(lead + count, last);
      holes += covered_to - std::max(lead, first);
    }
  }
  return holes + arena.unmapped_pages(first, last);
}

status page_supply::repair_range(stream_arena& arena, std::uintptr_t addr, std::size_t bytes,
                                 bool may_create, bool may_stitch) {
  const std::size_t first = arena.page_of(addr);
  const std::size_t last = arena.page_of(addr + bytes - 1) + 1;
  // Collected first: unmapping lifts shadows, which changes the block map.
  std::vector<std::size_t> shadowed;
  block_map& blocks = arena.blocks();
  for (auto b = blocks.find_containing(addr); b != blocks.end() && b->first < addr + bytes; ++b) {
    if (b->second.state != block_state::shadow) continue;
    const auto [from, to] = shadowed_pages(arena, b, first, last);
    for (std::size_t i = from; i < to; ++i) shadowed.push_back(i);
  }
  for (const std::size_t i : shadowed) {
    if (arena.page(i) == stream_arena::unmapped) continue;  // went with an earlier page's run
    if (auto s = unmap_run_at(arena, i); !s) {
      refresh_derived_stats();
      return s;
    }
  }
  refresh_derived_stats();
  return back_range(arena, addr, bytes, may_create, may_stitch);
}

}  // namespace strata
