// The sharded-fetch stage of the prefetcher: parameters registered as
// sharded keep only this rank's shard under the residency manager; using
// one needs the whole parameter, all-gathered from every rank's shard into
// a device buffer (its "full" buffer) on the communication stream.
//
// States of a sharded parameter (its full buffer):
//   none      -> gather() -> held: gathered (queued), not acquired
//   held      -> acquire() -> in use (acquired > 0)
//   in use    -> release() to 0 -> held again (kept) or none (resharded)
// A gather acquires the shard on the communication stream (read-only),
// allocates the full buffer there, queues the all-gather, records the
// parameter's event and releases the shard: the shard may spill again once
// the stream is past the gather. An acquire makes its stream wait for that
// event; nothing here waits for a device.
//
// Every rank must queue the same gathers in the same order (a collective),
// so the caller decides when to gather from what every rank sees alike
// (the order, the cursor, byte counts), never from local memory state.
//
// Cost: one all-gather, one allocation and one event record per gather; an
// acquire of a held buffer is one stream wait.
//
// Thread safety: none; the prefetcher calls it under its walk mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "strata/communicator.hpp"
#include "strata/residency.hpp"

namespace strata {

class shard_gathers {
 public:
  shard_gathers(residency_manager& buffers, allocator& alloc);
  shard_gathers(const shard_gathers&) = delete;
  shard_gathers& operator=(const shard_gathers&) = delete;
  shard_gathers(shard_gathers&&) = delete;
  shard_gathers& operator=(shard_gathers&&) = delete;
  // Waits for every communication stream, then frees the full buffers and
  // the events.
  ~shard_gathers();

  // Registers `handle` (a buffer of `buffers`, this rank's shard) as a
  // sharded parameter gathered by `comm` on `comm_stream` as `type`
  // elements. Errors: invalid_argument (unknown handle, already sharded, a
  // shard that is not whole elements, a full size that overflows), the
  // device's creating the event.
  status add(std::uint64_t handle, communicator& comm, stream_handle comm_stream, dtype type);
  [[nodiscard]] bool contains(std::uint64_t handle) const { return params_.contains(handle); }
  [[nodiscard]] bool empty() const { return params_.empty(); }
  // The full parameter's bytes (shard bytes x ranks); 0 if not sharded.
  [[nodiscard]] std::size_t full_bytes(std::uint64_t handle) const;

  // Whether the full buffer is held and not acquired: gathered ahead, or
  // kept after its last release. It will serve the next acquire.
  [[nodiscard]] bool waiting(std::uint64_t handle) const;
  // Whether the full buffer is acquired now.
  [[nodiscard]] bool in_use(std::uint64_t handle) const;
  // Bytes of full buffers gathered ahead and not acquired since.
  [[nodiscard]] std::uint64_t ahead_bytes() const noexcept { return ahead_bytes_; }

  // Queues the gather of `handle` (not held). `ahead`: for a later
  // acquire (counted as such). Errors: the residency manager's acquiring
  // the shard, out_of_memory for the full buffer, the communicator's; the
  // shard is released and nothing is held then.
  status gather(std::uint64_t handle, bool ahead);
  // The full buffer for work on `stream`, gathered now if not held.
  // Errors: gather's, the device's.
  result<void*> acquire(std::uint64_t handle, stream_handle stream);
  // Ends one acquire made on `stream`; at the last one the full buffer is
  // kept if `keep`, else freed in stream order (resharded). Errors:
  // invalid_argument (not acquired).
  status release(std::uint64_t handle, stream_handle stream, bool keep);

  // Drops sharded parameter `handle`, whose shard the residency manager no
  // longer has (unregistered): a held full buffer is freed in stream order
  // and its event destroyed (after a wait for the communication stream),
  // so nothing serves a stale copy. Errors:
  // invalid_argument while the full buffer is acquired (it stays).
  status forget(std::uint64_t handle);

  // Frees every full buffer held and not acquired (gathered ahead, or
  // kept after its last release) in stream order: at a step's end, before
  // the shards may be updated. Errors: the allocator's (the others are
  // still freed).
  status reshard_held();

  struct counters {
    std::uint64_t gathers = 0;          // all-gathers queued
    std::uint64_t gathers_ahead = 0;    // of those, queued before the acquire
    std::uint64_t gathers_reused = 0;   // acquires served by a kept full buffer
    std::uint64_t reshards = 0;         // full buffers freed after release
    std::uint64_t gather_failures = 0;  // gathers that failed to queue
    std::uint64_t gathered_bytes = 0;   // device bytes of full buffers held now
  };
  [[nodiscard]] const counters& stats() const noexcept { return c_; }

 private:
  struct sharded {
    communicator* comm;
    stream_handle stream;  // the communication stream
    dtype type;
    std::size_t shard_bytes;
    event_handle gathered{};  // recorded after the all-gather
    void* full = nullptr;     // held: gathered, kept or in use
    unsigned acquired = 0;
    bool ahead = false;  // gathered ahead, not acquired since
  };
  void set_ahead(sharded& p, bool on);
  // Frees p's full buffer (held, not acquired) after its streams' work.
  status reshard(sharded& p);

  residency_manager& buffers_;
  allocator& alloc_;
  std::unordered_map<std::uint64_t, sharded> params_;
  std::uint64_t ahead_bytes_ = 0;
  counters c_;
};

}  // namespace strata
