// Placement by earlier steps (step_replay.hpp): a large request goes to the
// address its counterpart got one step ago when that range is free and
// mapped, else two, three or four steps ago (a block that outlives its step
// is still live one step later, and its range then repeats every two
// steps); when none is, first fit decides (place()). Nothing here maps a
// page: a replayed request costs no driver call.
//
// Cost: one block lookup and one scan of the range's mapped bits (one step
// per 64 pages) per step looked back.
#include "caching_allocator.hpp"

namespace strata {

namespace {

constexpr std::size_t max_steps_back = 4;

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
    if (it == blocks.end() || !(it->second.mapped || arena.fully_mapped(want, size))) continue;
    st.replay.count(true);
    if (!st.replay.repeating()) return std::nullopt;
    it = blocks.allocate_at(it, want, size, requested);
    pages_.block_live(arena, want, size);
    return it;
  }
  st.replay.count(false);
  return std::nullopt;
}

}  // namespace strata
