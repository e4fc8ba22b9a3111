// Placement by earlier steps (step_replay.hpp): a large request goes to the
// address its counterpart got one step ago when that range is free and
// mapped, else two, three or four steps ago (a block that outlives its step
// is still live one step later, and its range then repeats every two
// steps); a fence inside such a range, left by the other layout's stitch,
// is lifted where no page is mapped on both of its sides (fence_lift.cpp).
// A replayed request maps nothing. When no such range is free and
// mapped, the one that is free but for a few pages live elsewhere is
// repaired (page_repair.cpp) if that maps at most half the pages first fit
// would, or at most 1/128 of the range: the request keeps its address, so
// the next step finds it again.
// A range a recent step repaired is repaired again only if few of its pages
// clash. Otherwise first fit decides (place()).
//
// Cost: one block lookup and one scan of the range's mapped bits (one step
// per 64 pages) per step looked back; when none is free, a walk of each
// range's blocks, and the repair's driver calls (one unmap per clashing
// page, plus mapping the holes).
#include <algorithm>
#include <array>
#include <limits>
#include <span>

#include "caching_allocator.hpp"

namespace strata {

namespace {

constexpr std::size_t max_steps_back = 4;

// A repair must map at most 1/repair_ratio of what first fit would. One
// that maps more (half a range or more clashes) leaves the request with a
// single range that two alternating layouts fight over (a block that
// outlives its step makes the layout repeat every two steps), so it would
// pay every step; a new range costs once, and each layout then has its own.
constexpr std::size_t repair_ratio = 2;

// A range a recent step already repaired is repaired again only when at
// most 1/rerepair_share of its pages clash: more means two layouts take
// turns with it (each repair undoes the other's), and a new range for one
// of them ends that.
constexpr std::size_t rerepair_share = 16;

// A repair that maps at most 1/small_repair_share of its range (a page in
// 256 MiB), the first for that range in the steps looked back, is taken
// even where first fit finds a range mapped already: a free mapped range
// is some other request's kept layout, and taking it shadows that request
// next step. On the GPT-2 snapshot the held logits took another range for
// want of 2 of their 393 pages, and the loss blocks were remapped in turn
// for three more steps. Larger shares (1/16, 1/64) left the RangeRepair
// training loop with two layouts trading a page every step; a range
// repaired again is such a pair, so for it first fit still decides.
constexpr std::size_t small_repair_share = 128;

}  // namespace

std::optional<block_map::iterator> caching_allocator::place_by_step(stream_state& st,
                                                                    stream_arena& arena,
                                                                    std::size_t size,
                                                                    std::size_t requested,
                                                                    std::size_t counterpart) {
  block_map& blocks = arena.blocks();
  std::size_t c = counterpart;
  for (std::size_t steps = 0; steps < max_steps_back && c != step_replay::none;
       ++steps, c = st.replay.previous(c)) {
    const std::uintptr_t want = st.replay.address(c);
    auto it = blocks.free_block_holding(want, size);
    // Free but cut by a fence the other layout's stitch left: lifted where
    // no page is mapped on both sides.
    if (it == blocks.end() && pages_.lift_fences_in(arena, want, size)) {
      it = blocks.free_block_holding(want, size);
    }
    if (it == blocks.end() || !(it->second.mapped || arena.fully_mapped(want, size))) continue;
    st.replay.count(true);
    if (!st.replay.repeating()) return std::nullopt;
    it = blocks.allocate_at(it, want, size, requested);
    pages_.block_live(arena, want, size);
    return it;
  }
  st.replay.count(false);
  if (!st.replay.repeating()) return std::nullopt;
  return repair_by_step(st, arena, size, requested, counterpart);
}

std::optional<block_map::iterator> caching_allocator::repair_by_step(stream_state& st,
                                                                     stream_arena& arena,
                                                                     std::size_t size,
                                                                     std::size_t requested,
                                                                     std::size_t counterpart) {
  constexpr std::size_t never = std::numeric_limits<std::size_t>::max();
  struct earlier {
    std::uintptr_t addr;
    bool repaired;
  };
  std::array<earlier, max_steps_back> ranges{};
  std::size_t n = 0;
  for (std::size_t c = counterpart; n < max_steps_back && c != step_replay::none;
       c = st.replay.previous(c)) {
    ranges[n++] = {st.replay.address(c), st.replay.repaired(c)};
  }
  const std::span<const earlier> found(ranges.data(), n);
  std::uintptr_t best = 0;
  std::size_t best_cost = never;
  bool best_again = false;
  for (const earlier& r : found) {
    const bool again = std::any_of(found.begin(), found.end(), [&](const earlier& e) {
      return e.repaired && e.addr == r.addr;
    });
    const std::size_t pages = arena.page_of(r.addr + size - 1) - arena.page_of(r.addr) + 1;
    const auto cost = pages_.repair_cost(arena, r.addr, size);
    if (cost && *cost < best_cost && !(again && *cost * rerepair_share > pages)) {
      best = r.addr;
      best_cost = *cost;
      best_again = again;
    }
  }
  if (best_cost == never) return std::nullopt;
  // What first fit would map instead, unless the repair is small and the
  // first for its range.
  block_map& blocks = arena.blocks();
  const std::size_t best_pages = arena.page_of(best + size - 1) - arena.page_of(best) + 1;
  const bool small = !best_again && best_cost * small_repair_share <= best_pages;
  const auto fit = small ? blocks.end() : blocks.first_fit(size);
  if (fit != blocks.end()) {
    const std::size_t fit_cost =
        fit->second.mapped ? 0
                           : arena.unmapped_pages(arena.page_of(fit->first),
                                                  arena.page_of(fit->first + size - 1) + 1);
    if (fit_cost < best_cost * repair_ratio) return std::nullopt;
  }
  // On failure nothing is lost: the range stays free, partly unmapped, and
  // first fit goes on from there.
  // A range repaired again lost pages stitched into it to the requests
  // that hold them elsewhere: idle pages stitched in now would be taken the
  // same way (on an H200's Qwen2.5 snapshot the same two pages of the
  // logits' range, every step, for ever). Its holes get pages mapped
  // nowhere else (the pool's, or new: at most 1/rerepair_share of the
  // range, once), which only this range uses.
  const bool may_create = !options_.wait_before_grow;
  if (!pages_.repair_range(arena, best, size, may_create, !(best_again && may_create))) {
    return std::nullopt;
  }
  auto it = blocks.free_block_holding(best, size);
  if (it == blocks.end()) return std::nullopt;
  it = blocks.allocate_at(it, best, size, requested);
  pages_.block_live(arena, best, size);
  st.replay.note_repair();
  return it;
}

}  // namespace strata
