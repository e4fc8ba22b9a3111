#include "segment_history.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace strata {

namespace {

// Maximal runs of mapped pages, keyed by their start. Invariant: runs do
// not overlap, and two runs that touch belong to different arenas or
// streams (else they are one run).
class run_set {
 public:
  explicit run_set(const std::vector<arena_range>& arenas) : arenas_(arenas) {}

  struct run {
    std::uintptr_t hi;
    std::uintptr_t stream;
  };
  using map = std::map<std::uintptr_t, run>;

  // Adds [lo, hi) (unmapped before), merging with touching runs of its
  // arena and stream. Returns the run that now holds it.
  map::iterator add(std::uintptr_t lo, std::uintptr_t hi, std::uintptr_t stream) {
    auto it = runs_.emplace(lo, run{hi, stream}).first;
    if (auto next = std::next(it); next != runs_.end() && joins(it, next)) {
      it->second.hi = next->second.hi;
      runs_.erase(next);
    }
    if (it != runs_.begin()) {
      if (auto prev = std::prev(it); joins(prev, it)) {
        prev->second.hi = it->second.hi;
        runs_.erase(it);
        it = prev;
      }
    }
    return it;
  }

  // Removes [lo, hi) wherever it is mapped, splitting runs.
  void remove(std::uintptr_t lo, std::uintptr_t hi) {
    auto it = runs_.upper_bound(lo);
    if (it != runs_.begin()) --it;
    while (it != runs_.end() && it->first < hi) {
      const std::uintptr_t rlo = it->first;
      const run r = it->second;
      if (r.hi <= lo) {
        ++it;
        continue;
      }
      it = runs_.erase(it);
      if (rlo < lo) runs_.emplace(rlo, run{lo, r.stream});
      if (r.hi > hi) it = runs_.emplace(hi, run{r.hi, r.stream}).first;
    }
  }

  // The run holding `addr`, or end().
  map::iterator holding(std::uintptr_t addr) {
    auto it = runs_.upper_bound(addr);
    if (it == runs_.begin()) return runs_.end();
    --it;
    return it->second.hi > addr ? it : runs_.end();
  }
  // The run ending exactly at `addr` / starting exactly at `addr`, or end().
  map::iterator ending_at(std::uintptr_t addr) {
    auto it = runs_.lower_bound(addr);
    if (it == runs_.begin()) return runs_.end();
    --it;
    return it->second.hi == addr ? it : runs_.end();
  }
  map::iterator starting_at(std::uintptr_t addr) { return runs_.find(addr); }
  map::iterator end() { return runs_.end(); }

 private:
  [[nodiscard]] std::size_t arena_of(std::uintptr_t addr) const {
    for (std::size_t i = 0; i < arenas_.size(); ++i) {
      if (addr >= arenas_[i].lo && addr < arenas_[i].hi) return i;
    }
    return arenas_.size();
  }
  [[nodiscard]] bool joins(map::iterator a, map::iterator b) const {
    return a->second.hi == b->first && a->second.stream == b->second.stream &&
           arena_of(a->first) == arena_of(b->first);
  }

  const std::vector<arena_range>& arenas_;
  map runs_;
};

trace_event segment_event(const trace_event& cause, trace_action action, std::uintptr_t lo,
                          const run_set::run& r) {
  trace_event e = cause;
  e.action = action;
  e.address = lo;
  e.size = r.hi - lo;
  e.stream = r.stream;
  return e;
}

bool is_page_event(const trace_event& e) {
  return e.action == trace_action::segment_map || e.action == trace_action::segment_unmap;
}

}  // namespace

std::vector<trace_event> segment_lifetimes(const std::vector<trace_event>& events,
                                           const std::vector<mapped_run>& now,
                                           const std::vector<arena_range>& arenas) {
  run_set runs(arenas);
  for (const mapped_run& r : now) runs.add(r.lo, r.hi, r.stream);
  // Undo the page events, newest first: the runs before the oldest event.
  // (std::views::reverse: clang 14 rejects libstdc++ 12's ranges.)
  for (auto e = events.rbegin(); e != events.rend(); ++e) {  // NOLINT(modernize-loop-convert)
    if (e->action == trace_action::segment_map) runs.remove(e->address, e->address + e->size);
    if (e->action == trace_action::segment_unmap) {
      runs.add(e->address, e->address + e->size, e->stream);
    }
  }
  std::vector<trace_event> out;
  out.reserve(events.size());
  for (const trace_event& e : events) {
    if (e.action == trace_action::stitch) continue;
    if (!is_page_event(e)) {
      out.push_back(e);
      continue;
    }
    const std::uintptr_t lo = e.address;
    const std::uintptr_t hi = e.address + e.size;
    if (e.action == trace_action::segment_map) {
      // The runs it touches end if it joins them (same arena and stream).
      std::vector<std::pair<std::uintptr_t, run_set::run>> touching;
      for (auto it : {runs.ending_at(lo), runs.starting_at(hi)}) {
        if (it != runs.end()) touching.emplace_back(it->first, it->second);
      }
      auto grown = runs.add(lo, hi, e.stream);
      for (const auto& [tlo, t] : touching) {
        if (tlo >= grown->first && t.hi <= grown->second.hi) {
          out.push_back(segment_event(e, trace_action::segment_free, tlo, t));
        }
      }
      out.push_back(segment_event(e, trace_action::segment_alloc, grown->first, grown->second));
      continue;
    }
    auto it = runs.holding(lo);
    if (it == runs.end()) continue;  // not mapped: nothing the viewer could show
    const std::uintptr_t rlo = it->first;
    const run_set::run r = it->second;
    out.push_back(segment_event(e, trace_action::segment_free, rlo, r));
    runs.remove(lo, hi);
    if (rlo < lo) out.push_back(segment_event(e, trace_action::segment_alloc, rlo, {lo, r.stream}));
    if (r.hi > hi) out.push_back(segment_event(e, trace_action::segment_alloc, hi, r));
  }
  return out;
}

}  // namespace strata
