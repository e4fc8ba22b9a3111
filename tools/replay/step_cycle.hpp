// A training trace's step, found and repeated: what `strata replay
// --timeline` measures as the steady state (docs/replay.md, "Steady state").
//
// A recording holds a few steps; a job runs thousands. The step is found at
// the trace's end: the last L ops repeat the L before them op by op (same
// kind, size and stream) and leave the same sizes live as they found, and
// they reach the trace's peak of live bytes, so that they are a whole step
// and not a loop inside one (the optimizer's per-parameter temporaries).
// The shortest such L is the step.
//
// Repeating it makes a longer trace in which the program goes on training:
// each repeat's blocks get addresses of their own (above every address in
// the trace); a block the step frees that it did not allocate (the previous
// step's gradients, say) is the block of the same size that the previous
// repeat allocated and left live, paired in order; times move on by one
// step's span; a profiler trace's kernels and waits in the step are
// repeated with it.
//
// Cost: O(ops) with a hash per op, plus O(ops) per candidate length that
// gets past the hash and the peak, within max_step_search in all.
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <optional>

#include "alloc_trace.hpp"

namespace strata::replay {

/// The trace's last step: ops [first_op, first_op + ops) of the trace.
struct step_cycle {
  std::size_t first_op = 0;
  std::size_t ops = 0;
  std::int64_t span_ns = 0;  // the recorded time from one step's start to the next's
};

/// Steps shorter than this many ops are loops inside a step, not steps.
inline constexpr std::size_t min_step_ops = 16;
/// The most ops find_last_step compares before it gives up (about a
/// tenth of a second), however the trace is built.
inline constexpr std::size_t max_step_search = std::size_t{1} << 27;
/// The most ops the repeats add (a few seconds of replay).
inline constexpr std::size_t max_repeated_ops = std::size_t{1} << 22;

/// The trace's last step, or nothing when its end does not repeat (a trace
/// of one step, or one that ends in something else) or when finding it
/// would compare more than `budget` ops. Needs a timed trace.
std::optional<step_cycle> find_last_step(const alloc_trace& trace,
                                         std::size_t budget = max_step_search);

/// `repeats`, or fewer where that many copies of `step` would add more
/// than max_repeated_ops (0 for a step longer than that).
std::size_t repeats_within_bound(const step_cycle& step, std::size_t repeats);

/// `trace` followed by repeats_within_bound(step, repeats) more copies of
/// `step` (found by find_last_step on it): what a replay reads, without
/// stack frames, the recorded allocator's failures or its reserved bytes.
alloc_trace with_step_repeated(const alloc_trace& trace, const step_cycle& step,
                               std::size_t repeats);

}  // namespace strata::replay
