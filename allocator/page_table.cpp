#include "page_table.hpp"

#include <algorithm>
#include <cassert>

#include "stream_arena.hpp"

namespace strata {

std::uint32_t page_table::add_run(page_run run, std::size_t pages) {
  std::uint32_t slot = 0;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(runs_.size());
    runs_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  run_entry& r = runs_[slot];
  r.handle = run;
  r.pages.reserve(pages);
  for (std::size_t k = 0; k < pages; ++k) {
    std::uint32_t id = 0;
    if (free_ids_.empty()) {
      id = static_cast<std::uint32_t>(pages_.size());
      pages_.emplace_back();
      parts_.emplace_back();
    } else {
      id = free_ids_.back();
      free_ids_.pop_back();
    }
    pages_[id].held = true;  // remove_run() left the entry as a new page
    parts_[id] = {slot, static_cast<std::uint32_t>(k)};
    r.pages.push_back(id);
  }
  return slot;
}

page_run page_table::remove_run(std::uint32_t slot) {
  run_entry& r = runs_[slot];
  for (const std::uint32_t id : r.pages) {
    page& p = pages_[id];
    assert(p.maps.empty() && p.live == 0 && !p.listed);
    p = page{};
    parts_[id] = run_part{};
    free_ids_.push_back(id);
  }
  const page_run handle = r.handle;
  r = run_entry{};
  free_slots_.push_back(slot);
  return handle;
}

void page_table::list_idle(std::uint32_t id) {
  page& p = pages_[id];
  if (p.listed) return;
  p.listed = true;
  p.prev = idle_tail_;
  p.next = none;
  if (idle_tail_ != none) {
    pages_[idle_tail_].next = id;
  } else {
    idle_head_ = id;
  }
  idle_tail_ = id;
  ++idle_count_;
}

void page_table::unlist_idle(std::uint32_t id) {
  page& p = pages_[id];
  if (!p.listed) return;
  if (p.prev != none) {
    pages_[p.prev].next = p.next;
  } else {
    idle_head_ = p.next;
  }
  if (p.next != none) {
    pages_[p.next].prev = p.prev;
  } else {
    idle_tail_ = p.prev;
  }
  p.prev = p.next = none;
  p.listed = false;
  --idle_count_;
}

std::vector<std::uint32_t> page_table::idle_pages() const {
  std::vector<std::uint32_t> out;
  out.reserve(idle_count_);
  for (std::uint32_t id = idle_head_; id != none; id = pages_[id].next) out.push_back(id);
  return out;
}

std::uint32_t page_table::mapping_at(const page& p, const stream_arena& arena, std::size_t index) {
  for (std::size_t k = 0; k < p.maps.size(); ++k) {
    if (p.maps[k].arena == &arena && p.maps[k].index == index) return static_cast<std::uint32_t>(k);
  }
  return none;
}

void page_table::add_mapping(std::uint32_t id, stream_arena& arena, std::size_t index) {
  page& p = pages_[id];
  assert(p.live == 0);
  p.maps.push_back({&arena, static_cast<std::uint32_t>(index), false});
  arena.set_page(index, id);
  list_idle(id);
}

void page_table::remove_mapping(stream_arena& arena, std::size_t index) {
  const std::uint32_t id = arena.page(index);
  page& p = pages_[id];
  const std::uint32_t k = mapping_at(p, arena, index);
  assert(k != none && k != p.active && (p.live == 0 || p.maps[k].shadowed));
  if (p.maps[k].shadowed) arena.blocks().unshadow(arena.page_addr(index), granularity_);
  p.maps.erase(p.maps.begin() + k);
  if (p.active != none && p.active > k) --p.active;
  arena.set_page(index, none);
  if (p.maps.empty()) unlist_idle(id);
  if (p.unsettled && std::none_of(p.maps.begin(), p.maps.end(),
                                  [](const page_mapping& m) { return m.shadowed; })) {
    std::erase(unsettled_, id);
    p.unsettled = false;
  }
}

void page_table::mark(std::vector<shadow_run>& runs, stream_arena* arena, std::uint32_t index) {
  // A block's pages are visited in order, and each page's other mappings
  // are usually in ranges mapped in page order too: the mark continues one
  // of the last few runs (one per such range).
  const std::size_t look = std::min(runs.size(), runs_looked_back);
  for (std::size_t k = runs.size(); k > runs.size() - look; --k) {
    shadow_run& r = runs[k - 1];
    if (r.arena == arena && r.first + r.count == index) {
      ++r.count;
      return;
    }
  }
  runs.push_back({arena, index, 1});
}

void page_table::apply(std::vector<shadow_run>& runs, bool on) const {
  for (const shadow_run& r : runs) {
    const std::uintptr_t va = r.arena->page_addr(r.first);
    const std::size_t bytes = std::size_t{r.count} * granularity_;
    if (on) {
      r.arena->blocks().shadow(va, bytes);
    } else {
      r.arena->blocks().unshadow(va, bytes);
    }
  }
  runs.clear();
}

void page_table::block_live(stream_arena& arena, std::uintptr_t addr, std::size_t bytes) {
  scratch_.clear();
  const std::size_t last = arena.page_of(addr + bytes - 1);
  for (std::size_t i = arena.page_of(addr); i <= last; ++i) {
    const std::uint32_t id = arena.page(i);
    assert(id != none);
    page& p = pages_[id];
    if (p.live++ > 0) {
      assert(p.maps[p.active].arena == &arena && p.maps[p.active].index == i);
      continue;
    }
    unlist_idle(id);
    if (p.maps.size() == 1) {  // its one mapping is this one: no shadow, no look at it
      p.active = 0;
      assert(p.maps[0].arena == &arena && p.maps[0].index == i && !p.maps[0].shadowed);
      continue;
    }
    p.active = mapping_at(p, arena, i);
    assert(p.active != none && !p.maps[p.active].shadowed);
    for (std::size_t k = 0; k < p.maps.size(); ++k) {
      page_mapping& m = p.maps[k];
      if (k == p.active || m.shadowed) continue;
      m.shadowed = true;
      mark(scratch_, m.arena, m.index);
    }
  }
  apply(scratch_, true);
}

bool page_table::lift_shadows(std::uint32_t id, std::vector<shadow_run>& out) {
  page& p = pages_[id];
  // Mapped once at most and not shadowed: nothing to lift. A lone mapping
  // can be shadowed: its page's other mapping, where it was freed, was
  // unmapped while this shadow waited on the free's epoch.
  if (p.maps.empty() || (p.maps.size() == 1 && !p.maps[0].shadowed)) return true;
  const bool epoch_done = p.freed_in == nullptr || p.freed_in->idle(p.freed_epoch);
  bool left = false;
  for (page_mapping& m : p.maps) {
    if (!m.shadowed) continue;
    if (epoch_done || m.arena->stream() == p.freed_in->stream()) {
      m.shadowed = false;
      mark(out, m.arena, m.index);
    } else {
      left = true;
    }
  }
  return !left;
}

void page_table::block_dead(stream_arena& arena, std::uintptr_t addr, std::size_t bytes) {
  scratch_.clear();
  const std::size_t last = arena.page_of(addr + bytes - 1);
  for (std::size_t i = arena.page_of(addr); i <= last; ++i) {
    const std::uint32_t id = arena.page(i);
    page& p = pages_[id];
    assert(p.live > 0);
    if (--p.live > 0) continue;
    p.active = none;
    p.freed_in = &arena;
    p.freed_epoch = arena.page_epoch(i);
    if (!lift_shadows(id, scratch_) && !p.unsettled) {
      unsettled_.push_back(id);
      p.unsettled = true;
    }
    list_idle(id);
  }
  apply(scratch_, false);
}

bool page_table::epoch_pending(std::uint32_t id) const {
  const page& p = pages_[id];
  return p.freed_in != nullptr && !p.freed_in->idle(p.freed_epoch);
}

bool page_table::usable_in(std::uint32_t id, const stream_arena& arena) const {
  const page& p = pages_[id];
  if (p.live > 0) return false;
  return p.freed_in == nullptr || p.freed_in->stream() == arena.stream() ||
         p.freed_in->idle(p.freed_epoch);
}

void page_table::settle() {
  scratch_.clear();
  for (std::size_t u = 0; u < unsettled_.size();) {
    const std::uint32_t id = unsettled_[u];
    page& p = pages_[id];
    // A page active again keeps its shadows: it is off this list then.
    if (p.live > 0 || lift_shadows(id, scratch_)) {
      p.unsettled = false;
      unsettled_[u] = unsettled_.back();
      unsettled_.pop_back();
    } else {
      ++u;
    }
  }
  apply(scratch_, false);
}

}  // namespace strata
