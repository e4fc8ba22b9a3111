// Lifting fences (block_map.hpp): a stitched range is a segment of its own,
// fenced off at both ends, so that no block can ever span two mappings of
// one page. A fence may go once no page is mapped on both of its sides (in
// the two segments it separates); a page straddling an unaligned fence is
// one mapping, on both sides.
//
// Why lift one before the address space runs out: training alternates
// between two layouts (a block that outlives its step makes the layout
// repeat every other step), and a range one layout stitched can end inside
// a range the other layout's request had. Its fence then splits that range,
// the request misses its earlier address, and a new range of thousands of
// pages is stitched (an H200's Qwen2.5 run: the held logits' range was cut
// by the fp32 embedding gradient's, and its sixth step remapped 10 GiB).
//
// Cost: per fence, the pages mapped in the segments on its two sides,
// gathered and sorted (O(p log p)); no device call.
#include <algorithm>
#include <iterator>
#include <vector>

#include "page_supply.hpp"

namespace strata {

namespace {

// The ids of the pages mapped in [from, to) of `arena`, sorted.
std::vector<std::uint32_t> mapped_ids(const stream_arena& arena, std::uintptr_t from,
                                      std::uintptr_t to) {
  std::vector<std::uint32_t> out;
  if (to <= from) return out;
  const std::size_t last = arena.page_of(to - 1) + 1;
  for (std::size_t i = arena.next_mapped(arena.page_of(from), last); i < last;
       i = arena.next_mapped(i + 1, last)) {
    out.push_back(arena.page(i));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool page_supply::lift_fence(stream_arena& arena, std::uintptr_t f) {
  block_map& blocks = arena.blocks();
  const std::vector<std::uint32_t> before = mapped_ids(arena, blocks.prev_fence(f - 1), f);
  const std::vector<std::uint32_t> after = mapped_ids(arena, f, blocks.next_fence(f));
  std::vector<std::uint32_t> shared;
  std::set_intersection(before.begin(), before.end(), after.begin(), after.end(),
                        std::back_inserter(shared));
  const bool straddles = shared.size() == 1 && f % granularity_ != 0 &&
                         arena.is_mapped(arena.page_of(f)) &&
                         arena.page(arena.page_of(f)) == shared.front();
  if (!shared.empty() && !straddles) return false;
  blocks.drop_fence(f);
  return true;
}

void page_supply::drop_fences(stream_arena& arena) {
  const std::vector<std::uintptr_t> fences(arena.blocks().fences().begin(),
                                           arena.blocks().fences().end());
  for (const std::uintptr_t f : fences) (void)lift_fence(arena, f);
}

bool page_supply::lift_fences_in(stream_arena& arena, std::uintptr_t addr, std::size_t bytes) {
  block_map& blocks = arena.blocks();
  const std::uintptr_t end = addr + bytes;
  for (auto b = blocks.find_containing(addr); b != blocks.end() && b->first < end; ++b) {
    if (b->second.state != block_state::free) return false;
  }
  const auto& fences = blocks.fences();
  const std::vector<std::uintptr_t> inside(fences.upper_bound(addr), fences.lower_bound(end));
  return std::all_of(inside.begin(), inside.end(),
                     [&](std::uintptr_t f) { return lift_fence(arena, f); });
}

}  // namespace strata
