// The deferred-free queue: frees that cannot be reused at once, and the
// streams recorded on live blocks.
//
// - A stream-ordered free on another stream than the block's, or of a block
//   used on recorded streams, carries events recorded at free time on those
//   streams; it completes when all have.
// - Device-wide frees (free(p), like cudaFree) go into the open batch: no
//   device call per free. The batch is sealed with one event per stream the
//   allocator has seen when the cache needs memory; a sealed batch completes
//   when its events have (batches complete in order).
// The queue never touches an arena: completed frees are handed back to the
// allocator, which returns their blocks.
//
// Invariants: every event held here came from `events` and goes back to it
// exactly once (when its free completes, or at destruction); a block is in
// the queue at most once.
//
// Thread safety: none; the allocator's mutex serializes calls, except
// `recorded_any()`, which any thread may read at any time (fast path).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "event_pool.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"

namespace strata {

struct stream_state;
class stream_arena;

// A freed block waiting for events before it returns to its arena.
struct pending_free {
  stream_state* owner = nullptr;
  stream_arena* arena = nullptr;
  std::uintptr_t addr = 0;
  std::vector<event_handle> events;
};

class deferred_frees {
 public:
  // `dev`, `events` and `stats` (whose num_sync_all_streams this counts)
  // must outlive the queue.
  deferred_frees(device& dev, event_pool& events, allocator_stats& stats)
      : dev_(dev), events_(events), stats_(stats) {}
  deferred_frees(const deferred_frees&) = delete;
  deferred_frees& operator=(const deferred_frees&) = delete;
  deferred_frees(deferred_frees&&) = delete;
  deferred_frees& operator=(deferred_frees&&) = delete;
  // Gives every event still held back to the pool (the caller has
  // synchronized the device).
  ~deferred_frees();

  // Queues the free of the block at `addr` (owned by `owner`, in `arena`,
  // allocated on `home`). Device-wide: into the open batch. Otherwise on
  // `free_stream`: with an event on it (unless it is `home`) and on each
  // stream recorded for the block. Forgets the block's recorded streams.
  // Errors: the device's from recording an event; nothing changes then.
  status defer(pending_free p, stream_handle home, stream_handle free_stream, bool device_wide);
  // Frees whose events have all completed move to `done` (their events
  // returned); the open batch is sealed first. If a stream cannot take the
  // seal's event, the device is synchronized and the open batch is done.
  // Errors: the device's (query, synchronize); what moved to `done` so far
  // stays there.
  status take_completed(std::vector<pending_free>& done);
  // Seals the open batch, waits for every event of the queue and moves
  // every free to `done`. Errors: the device's.
  status wait_all(std::vector<pending_free>& done);
  [[nodiscard]] bool empty() const noexcept {
    return pending_.empty() && open_batch_.empty() && sealed_batches_.empty();
  }
  // Calls `f(const pending_free&)` for every queued free.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& p : pending_) f(p);
    for (const auto& p : open_batch_) f(p);
    for (const auto& b : sealed_batches_) {
      for (const auto& p : b.frees) f(p);
    }
  }

  // Records that the block at `addr` (allocated on `home`) is used on
  // `stream`: its free waits for the work queued there.
  void record(std::uintptr_t addr, stream_handle home, stream_handle stream);
  [[nodiscard]] bool recorded(std::uintptr_t addr) const {
    return !recorded_streams_.empty() && recorded_streams_.contains(addr);
  }
  // True if any live block has recorded streams. Any thread, no lock.
  [[nodiscard]] bool recorded_any() const noexcept {
    return recorded_any_.load(std::memory_order_relaxed);
  }
  // Adds `s` to the streams device-wide frees wait for.
  void note_stream(stream_handle s);

 private:
  struct sealed_batch {
    std::vector<pending_free> frees;
    std::vector<event_handle> events;
  };
  status seal_open_batch(std::vector<pending_free>& done);
  // Records one event per stream into `out`; on failure gives every event
  // back and leaves `out` empty.
  status record_events(const std::vector<stream_handle>& streams, std::vector<event_handle>& out);
  // True when every event has completed.
  yes_no all_done(const std::vector<event_handle>& events);
  void give_back(std::vector<event_handle>& events);

  device& dev_;
  event_pool& events_;
  allocator_stats& stats_;
  std::vector<stream_handle> seen_streams_;
  std::unordered_map<std::uintptr_t, std::vector<stream_handle>> recorded_streams_;
  std::atomic<bool> recorded_any_{false};  // !recorded_streams_.empty(), for the fast path
  std::vector<pending_free> pending_;
  std::vector<pending_free> open_batch_;
  std::deque<sealed_batch> sealed_batches_;
};

}  // namespace strata
