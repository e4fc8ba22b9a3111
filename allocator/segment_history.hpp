// Segment lifetimes for snapshot exports. The event trace records pages:
// segment_map and segment_unmap of page runs. A PyTorch snapshot shows
// segments: in Strata's export, each maximal run of mapped pages of one
// arena. PyTorch's viewer draws segments over time only from segment_alloc
// and segment_free events whose addresses match the segments exactly, so
// the page events are rewritten as the segments they create and end: a map
// next to a segment ends it and begins the grown one; an unmap ends its
// segment and begins what is left on either side.
//
// The runs mapped when the oldest event in the ring was recorded are found
// by undoing the events, newest first, from the runs mapped now.
//
// Cost: O(events x log runs), at export only. Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "event_trace.hpp"

namespace strata {

/// A run of mapped pages [lo, hi) of one arena, whose stream is `stream`.
struct mapped_run {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
  std::uintptr_t stream = 0;
};

/// An arena's reserved range [lo, hi): runs never merge across arenas.
struct arena_range {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
};

/// `events` (oldest first) with every segment_map/segment_unmap replaced by
/// the segment_free and segment_alloc events of the runs it changed, and
/// `stitch` events left out (their pages appear as unmaps and maps). `now`:
/// the runs mapped at the end; `arenas`: every arena's range.
std::vector<trace_event> segment_lifetimes(const std::vector<trace_event>& events,
                                           const std::vector<mapped_run>& now,
                                           const std::vector<arena_range>& arenas);

}  // namespace strata
