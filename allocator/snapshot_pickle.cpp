// snapshot_pickle(): the allocator's state and event trace in the structure
// of PyTorch's torch.cuda.memory._dump_snapshot, so PyTorch's memory
// visualizer (pytorch.org/memory_viz) and its scripts read it.
//
// Mapping: every run of adjacent mapped pages in an arena is one segment;
// large blocks, and the objects of small-arena slabs, are its blocks,
// clipped to the run, and what lies between them (the ends of slabs) is an
// inactive block, so the blocks tile the segment exactly: the viewer walks
// a segment's blocks to find their addresses and checks their sizes add up
// to total_size. Trace events keep their PyTorch names and carry requested
// sizes; page events become segment_alloc/segment_free of the segments
// (segment_history.hpp), which every view of the viewer draws.
#include <algorithm>
#include <span>
#include <string_view>
#include <unordered_map>

#include "caching_allocator.hpp"
#include "frame_symbols.hpp"
#include "pickle_writer.hpp"
#include "segment_history.hpp"

namespace strata {

namespace {

struct segment_totals {
  std::uint64_t allocated = 0;
  std::uint64_t active = 0;
  std::uint64_t requested = 0;
};

// PyTorch's frame list: [{"name", "filename", "line"}], innermost first.
void write_frames(pickle_writer& w, std::span<void* const> frames, frame_symbols& symbols) {
  w.key("frames");
  w.begin_list();
  for (void* pc : frames) {
    const frame_symbol& s = symbols.of(pc);
    w.begin_dict();
    w.field("name", s.name);
    w.field("filename", s.filename);
    w.key("line");
    w.integer(0);
    w.end_dict();
  }
  w.end_list();
}

void write_block(pickle_writer& w, std::uintptr_t addr, std::size_t size, std::size_t requested,
                 const char* state, std::span<void* const> frames, frame_symbols& symbols) {
  w.begin_dict();
  w.field_uint("address", addr);
  w.field_uint("size", size);
  w.field_uint("requested_size", requested);
  w.field("state", state);
  write_frames(w, frames, symbols);
  w.end_dict();
}

const char* object_state_name(object_state s) {
  switch (s) {
    case object_state::live:
      return "active_allocated";
    case object_state::pending:
      return "active_pending_free";
    default:
      return "inactive";
  }
}

}  // namespace

std::string caching_allocator::snapshot_pickle() {
  std::lock_guard lock(mu_);
  pickle_writer w;
  w.begin_dict();
  const std::vector<trace_event> events = trace_.events();
  // Each live block's frames are those of its latest alloc event.
  std::unordered_map<std::uintptr_t, std::span<void* const>> alloc_frames;
  for (const trace_event& e : events) {
    if (e.action == trace_action::alloc) alloc_frames[e.address] = trace_.frames_of(e);
  }
  frame_symbols symbols;
  std::vector<mapped_run> runs;
  std::vector<arena_range> ranges;
  w.key("segments");
  w.begin_list();
  for (stream_arena* arena : streams_.arenas()) {
    stream_arena& a = *arena;
    const auto native = reinterpret_cast<std::uintptr_t>(a.stream().native);
    ranges.push_back({a.page_addr(0), a.page_addr(0) + a.page_count() * pages_.granularity()});
    for (std::size_t i = a.next_mapped(0, a.page_count()); i < a.page_count();) {
      std::size_t j = i;
      while (j + 1 < a.page_count() && a.is_mapped(j + 1)) ++j;
      const std::uintptr_t lo = a.page_addr(i);
      const std::uintptr_t hi = a.page_addr(j) + pages_.granularity();
      // Blocks of the segment, clipped to it; the totals follow them.
      segment_totals t;
      std::uintptr_t cursor = lo;  // blocks so far tile [lo, cursor)
      const auto add = [&](std::uintptr_t addr, std::size_t size, std::size_t requested,
                           const char* state) {
        const std::uintptr_t b = std::max({addr, lo, cursor});
        const std::uintptr_t e = std::min<std::uintptr_t>(addr + size, hi);
        if (b >= e) return;
        if (b > cursor) write_block(w, cursor, b - cursor, 0, "inactive", {}, symbols);
        cursor = e;
        const std::string_view s = state;
        if (s == "active_allocated") {
          t.allocated += e - b;
          t.requested += requested;
        }
        if (s != "inactive") t.active += e - b;
        const auto f = alloc_frames.find(addr);
        write_block(
            w, b, e - b, requested, state,
            s != "inactive" && f != alloc_frames.end() ? f->second : std::span<void* const>{},
            symbols);
      };
      w.begin_dict();
      w.key("device");
      w.integer(0);
      w.field_uint("address", lo);
      w.field_uint("total_size", hi - lo);
      w.field_uint("stream", native);
      w.field("segment_type", a.kind() == pool_kind::small ? "small" : "large");
      w.key("segment_pool_id");
      w.begin_tuple();
      w.integer(0);
      w.integer(0);
      w.end_tuple();
      w.key("is_expandable");
      w.boolean(false);
      w.field_empty_list("frames");
      w.key("blocks");
      w.begin_list();
      for (auto it = a.blocks().begin(); it != a.blocks().end(); ++it) {
        const block_info& b = it->second;
        if (it->first >= hi || it->first + b.size <= lo) continue;
        const bool in_use = b.in_use();
        const slab* s = a.kind() == pool_kind::small && in_use ? a.slab_of(it->first) : nullptr;
        if (s != nullptr) {
          for (std::uint32_t o = 0; o < s->capacity; ++o) {
            const object_state st = s->state(o);
            add(s->address(o), s->object_size, st == object_state::live ? s->requested(o) : 0,
                object_state_name(st));
          }
          continue;
        }
        // Free space, parked blocks and shadows (pages whose bytes are live
        // at another of their mappings) hold no block here.
        const bool parked = is_parked(b);
        const char* state = !in_use || parked                 ? "inactive"
                            : b.state == block_state::pending ? "active_pending_free"
                                                              : "active_allocated";
        add(it->first, b.size, b.state == block_state::allocated && !parked ? b.requested : 0,
            state);
      }
      if (cursor < hi) write_block(w, cursor, hi - cursor, 0, "inactive", {}, symbols);
      w.end_list();
      runs.push_back({lo, hi, native});
      w.field_uint("allocated_size", t.allocated);
      w.field_uint("active_size", t.active);
      w.field_uint("requested_size", t.requested);
      w.end_dict();
      i = a.next_mapped(j + 1, a.page_count());
    }
  }
  w.end_list();

  w.key("device_traces");
  w.begin_list();
  w.begin_list();
  for (const trace_event& e : segment_lifetimes(events, runs, ranges)) {
    w.begin_dict();
    w.field("action", trace_action_name(e.action));
    // PyTorch's oom entry has the device's free bytes where others have addr.
    w.field_uint(e.action == trace_action::oom ? "device_free" : "addr", e.address);
    w.field_uint("size", e.size);
    w.field_uint("stream", e.stream);
    w.key("time_us");
    w.integer(e.time_ns / 1000);
    write_frames(w, trace_.frames_of(e), symbols);
    w.end_dict();
  }
  w.end_list();
  w.end_list();

  w.key("allocator_settings");
  w.begin_dict();
  w.field("allocator", "strata");
  w.field_uint("trace_buffer", trace_.capacity());
  w.field_uint("trace_frames", options_.trace_frames);
  w.end_dict();
  w.end_dict();
  return std::move(w).finish();
}

}  // namespace strata
