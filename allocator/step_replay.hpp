// Step replay: training repeats its requests every step, so a large
// request goes back to the address the same request got in an earlier
// step (step_placement.cpp places it; this class finds "the same request").
//
// Why: first fit alone never settles on one layout. A range a request held
// last step is split by another request or shadowed (its pages also mapped
// where other blocks are live), so the request stitches fresh address space
// again, step after step, and every stitch costs driver calls on a real
// GPU. Once a step's requests all get their earlier addresses, the next
// step finds the same blocks live at every point, the same ranges free and
// mapped, and maps nothing (bench/RESULTS.md, "Defragmentation on the
// timeline").
//
// "The same request" is found by alignment, not by counting requests: a
// cursor points into the history at the request the next one should
// repeat. The next request of the size found at the cursor, or up to
// `slack` requests on (the previous step made requests this one does not:
// the thread cache serves some large requests in one step and not the
// next), is its *counterpart*, and the cursor moves past it; a request that
// matches nothing leaves the cursor where it is. After `resync_after`
// misses in a row the replay is lost: no request has a counterpart until
// the cursor moves, every `resync_every` requests, to the nearest place
// (within `resync_reach` of where it would be) whose preceding `window`
// sizes match the last ones, or a seed (below) puts it somewhere. The
// cursor is first set by hashing: windows of the last `window` sizes are
// hashed, and a window seen before, at least `min_period` requests ago,
// puts the cursor after it (a step's windows recur a step apart; a layer's
// recur sooner, and a layer's counterpart is often still live, kept for the
// backward pass). Only every 8th window (by hash) is remembered, chosen by
// content, so every step samples the same windows. Each entry keeps its
// own counterpart: the request two steps back is one link further.
//
// A step whose shapes changed (dynamic padding: every activation sized by
// the batch's sequence length) makes the same requests in the same order
// at other sizes, so sizes stop matching, and where they do they can
// mislead (the fp32 logits at one length are the bf16 logits' size at
// twice it). After `resized_after` misses in a row, each a request of at
// least `resized_min` bytes within `resized_ratio` of the request in its
// place, the request in its place is the counterpart; for `resized_run`
// requests after such a match (past the next step's start) the request at
// the cursor is preferred, when it is within that ratio, to one of the
// same size a few on. A request then goes back to the range of the one in
// its place, and a shorter step's block takes the start of a longer one's
// range (step_placement.cpp).
//
// Invariants: history entry r % capacity holds request r for the last
// min(n, capacity) requests; the cursor, when set, is an earlier request.
// Cost: record() is one hash step and, every 8th request, one table probe
// (while lost, every `resync_every` requests, a resync compares at most
// 2 x resync_reach windows); counterpart() looks at `slack` entries at
// most. The history (`capacity` entries, 768 KiB) and the table (64 KiB)
// are made by reserve(), before a stream's first large request is placed:
// nothing after it allocates, so a request once placed is always recorded.
//
// Thread safety: none; the allocator's mutex serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

class step_replay {
 public:
  static constexpr std::size_t none = SIZE_MAX;

  /// The earlier request the next one, of `size` bytes, repeats, or none.
  [[nodiscard]] std::size_t counterpart(std::size_t size) const noexcept;
  /// The request that request `r` repeated, if it is still in the
  /// history; else none.
  [[nodiscard]] std::size_t previous(std::size_t r) const noexcept;
  /// The address request `r`, one still in the history, got.
  [[nodiscard]] std::uintptr_t address(std::size_t r) const noexcept { return at(r).addr; }
  /// Makes the history and the window table (once; then a no-op). Call
  /// before placing a request: record() then cannot fail. Throws
  /// std::bad_alloc when the host has not the 832 KiB.
  void reserve();
  /// Records that the next request, of `size` bytes, repeating
  /// `counterpart` (or none), was placed at `addr`. Needs reserve().
  void record(std::size_t size, std::uintptr_t addr, std::size_t counterpart) noexcept;
  /// Notes that the request about to be recorded was placed by repairing
  /// its range (step_placement.cpp).
  void note_repair() noexcept { repairing_ = true; }
  /// True when request `r`, one still in the history, was placed by a
  /// repair.
  [[nodiscard]] bool repaired(std::size_t r) const noexcept { return at(r).repaired; }
  /// Requests recorded so far.
  [[nodiscard]] std::size_t requests() const noexcept { return n_; }

  /// Counts whether a request with a counterpart could have had an earlier
  /// step's range (free and mapped when it came).
  void count(bool available) noexcept {
    available_ = available_ - available_ / count_span + (available ? count_one : 0);
  }
  /// True when about half of the last ~64 requests counted could have: the
  /// layout repeats. Where it does not (a trace whose "steps" differ), the
  /// earlier ranges are no guide, and keeping to them costs pages that
  /// first fit would not.
  [[nodiscard]] bool repeating() const noexcept { return available_ >= count_span / 2 * count_one; }

  static constexpr std::size_t capacity = std::size_t{1} << 15;  // requests remembered
  static constexpr std::size_t window = 24;                      // sizes hashed per window
  static constexpr std::size_t min_period = 256;                 // see above
  static constexpr std::size_t slack = 8;                        // see above
  static constexpr std::size_t resync_after = 4;
  static constexpr std::size_t resync_every = 4;  // while lost, a resync every so many requests
  static constexpr std::size_t resync_reach = 64;
  // Steps whose shapes changed (above). resized_run outlasts a step (a
  // training step makes a few hundred to a few thousand large requests), so
  // the next step's first requests keep their places before a match of
  // their own.
  static constexpr std::size_t resized_min = std::size_t{4} << 20;
  static constexpr std::size_t resized_ratio = 4;
  static constexpr std::size_t resized_after = 2;
  static constexpr std::size_t resized_run = 1024;
  static constexpr std::size_t count_span = 64;   // requests count() averages over
  static constexpr std::size_t count_one = 1024;  // one available request in available_

 private:
  struct entry {
    std::size_t size;
    std::uintptr_t addr;
    std::size_t counterpart;  // the request this one repeated, or none
    bool repaired;            // placed by repairing its range
  };
  struct seen {
    std::uint64_t hash = 0;
    std::size_t pos = 0;  // requests recorded when the window ended
  };

  [[nodiscard]] const entry& at(std::size_t r) const noexcept { return history_[r % capacity]; }
  // True when request r is still in the history.
  [[nodiscard]] bool held(std::size_t r) const noexcept { return r < n_ && n_ - r <= capacity; }
  // True when request r is held and it and a request of `size` bytes are
  // both at least resized_min and within resized_ratio of each other.
  [[nodiscard]] bool resized(std::size_t r, std::size_t size) const noexcept;
  // True when the `window` sizes before request n_ match those before `pos`.
  [[nodiscard]] bool windows_match(std::size_t pos) const noexcept;
  // Puts the cursor after an earlier window like the last one, if the
  // table holds one; remembers the last window.
  void seed() noexcept;
  // Moves the cursor to the nearest position within resync_reach whose
  // preceding window matches the last one.
  void resync() noexcept;

  std::vector<entry> history_;
  std::size_t n_ = 0;        // requests recorded
  std::uint64_t hash_ = 0;   // of the last `window` sizes
  std::vector<seen> table_;  // sampled windows by hash; made by reserve()
  std::size_t cursor_ = none;
  std::size_t misses_ = 0;      // requests in a row that matched nothing at the cursor
  bool misses_resized_ = true;  // each of them resized() from the request in its place
  std::size_t resizing_ = 0;    // requests left to prefer the cursor (resized_run)
  std::size_t available_ = 0;   // x count_one: a moving sum of count() over ~count_span requests
  bool repairing_ = false;      // note_repair() since the last record()
};

}  // namespace strata
