// The allocator's event trace: an optional ring buffer of what it did.
//
// Each event is (time, action, address, size, stream). The ring holds the
// last `capacity` events; older ones are overwritten and counted as
// dropped. Capacity 0 turns tracing off: the allocator then never calls
// record() (one branch on its slow path, nothing on the fast path).
//
// Cost: record() reads the monotonic clock and writes one slot: no lock of
// its own, no system call (the clock is read through the vDSO), no heap
// allocation (the ring is allocated up front). With frames on
// (trace_frames:N), it also captures N return addresses (frame_capture.hpp).
//
// Thread safety: none; the allocator records and exports under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frame_capture.hpp"

namespace strata {

enum class trace_action : std::uint8_t {
  alloc,           // a block handed out
  free_requested,  // the caller freed it
  free_completed,  // it became reusable (at once, or when its events completed)
  segment_map,     // pages mapped at [address, address+size)
  segment_unmap,   // pages unmapped
  stitch,          // pages moved from holes elsewhere to back a request
  oom,             // a request failed; size = the request
  // Written only by snapshot exports (segment_history.hpp), never recorded:
  segment_alloc,  // a segment (a maximal run of mapped pages) begins
  segment_free,   // a segment ends (it grew, shrank, split or went away)
};

/// The action's name as PyTorch's memory snapshots spell it ("alloc", ...).
const char* trace_action_name(trace_action a) noexcept;

struct trace_event {
  std::int64_t time_ns = 0;  // monotonic clock
  trace_action action = trace_action::alloc;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;  // the native stream handle
  std::uint64_t seq = 0;      // its number since the trace began (frames_of)
};

class event_trace {
 public:
  /// A ring of `capacity` events (0 means off), each with up to `frames`
  /// native stack frames (0: none).
  explicit event_trace(std::size_t capacity, std::size_t frames = 0)
      : ring_(capacity), frames_(frames, capacity) {}

  [[nodiscard]] bool on() const noexcept { return !ring_.empty(); }

  /// Appends an event stamped now. Precondition: on().
  void record(trace_action action, std::uintptr_t address, std::size_t size,
              const void* stream) noexcept;

  /// Events still in the ring, oldest first.
  [[nodiscard]] std::vector<trace_event> events() const;
  /// The frames captured with `e` (one of events()), innermost first; empty
  /// when frames are off.
  [[nodiscard]] std::span<void* const> frames_of(const trace_event& e) const noexcept {
    return frames_.frames(e.seq);
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return ring_.size(); }
  /// Events recorded since creation, and how many of them were overwritten.
  [[nodiscard]] std::uint64_t recorded() const noexcept { return next_; }
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    return next_ > ring_.size() ? next_ - ring_.size() : 0;
  }

  /// {"capacity":N,"recorded":N,"dropped":N,"events":[{"time_ns":...,
  /// "action":"alloc","address":"0x...","size":N,"stream":"0x..."}]}
  [[nodiscard]] std::string to_json() const;

 private:
  std::vector<trace_event> ring_;
  frame_capture frames_;
  std::uint64_t next_ = 0;
};

}  // namespace strata
