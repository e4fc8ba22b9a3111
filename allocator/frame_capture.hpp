// Native stack frames for the event trace (trace_frames:N): up to N return
// addresses per event, captured with backtrace() into a ring allocated up
// front (slots x N pointers), symbolized only at export (frame_symbols).
//
// Leading frames inside Strata's own shared object (the allocator's call
// chain) are skipped at capture, so a slot starts at the caller's code;
// when Strata is linked into the program itself, nothing is skipped.
//
// Cost: one backtrace() per event (about 2 us here, bench/trace_bench), no lock of its own, no heap
// allocation, no system call after construction (which unwinds once, so the unwinder is loaded).
//
// Thread safety: none; the allocator captures and exports under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "strata/allocator_options.hpp"

namespace strata {

class frame_capture {
 public:
  /// Most frames per event: trace_frames' upper bound in the options table.
  static constexpr std::size_t max_frames = max_trace_frames;

  /// `frames` per event (0: off) for `slots` events.
  frame_capture(std::size_t frames, std::size_t slots);

  [[nodiscard]] bool on() const noexcept { return frames_ > 0; }

  /// Captures the calling thread's stack into `slot` (mod slots).
  void capture(std::uint64_t slot) noexcept;
  /// The frames captured into `slot`, innermost first.
  [[nodiscard]] std::span<void* const> frames(std::uint64_t slot) const noexcept;

 private:
  std::size_t frames_;
  std::size_t slots_;
  std::vector<void*> ring_;           // slots_ x frames_
  std::vector<std::uint8_t> counts_;  // frames captured per slot
  std::uintptr_t own_lo_ = 0;         // Strata's object's executable range
  std::uintptr_t own_hi_ = 0;
};

}  // namespace strata
