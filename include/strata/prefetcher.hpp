// The prefetcher: buffers arrive on the device before the work that needs
// them (docs/prefetch.md).
//
//   begin_step()                 a training step starts
//   acquire(handle, stream)      as residency_manager::acquire, and the
//                                buffers needed next are fetched ahead
//   release(handle, stream)      as residency_manager::release
//   acquire_host(handle)         as residency_manager::acquire_host, and
//   release_host(handle)         the same fetching ahead (host holds are
//                                accesses of the order too)
//   end_step()                   the step is over
//   prefetch(handle)             a hint: fetch this one now
//
// The first step (begin_step to end_step) records the order of acquires
// (handle, stream, bytes, and whether it is a host hold). Later steps follow it with a cursor: an
// acquire of another buffer than the next recorded one re-synchronizes at the next position that
// buffer has in the order (counted, and logged to stderr once per step with the handle that
// differed); a buffer not in the order at all leaves the cursor where it is (counted as
// unrecorded). The order itself stays as recorded.
//
// At each acquire the scheduler walks the order from the cursor (wrapping
// into the next step) over the accesses that start within the lookahead,
// in order: those within `device_lookahead` bytes are fetched to the
// device while the bytes headed there (fills in flight plus prefetched
// buffers not yet acquired) stay within `prefetch_bytes` and at most
// `prefetch_inflight` fills are outstanding; the first that does not fit
// stops device fetches for this walk. Those within `host_lookahead` bytes
// are read from NVMe into pinned host memory (within `prefetch_inflight`);
// so are a host hold's (an optimizer step on host threads), never fetched
// to the device, within at most an eighth of a capped host tier (holds
// run back to back; read further ahead, a hold's buffer is the first thing
// later spills push out, and is read again).
// A fetch never spills a buffer needed sooner than the one it brings in:
// with no room it is not issued, and counted. The order is also the
// residency manager's eviction oracle: spill the buffer needed furthest
// ahead; one needed within `reuse_distance` bytes stays unless nothing
// else can go.
//
// Sharded parameters (ZeRO-3, FSDP's full shard; add_sharded): the
// residency manager holds only this rank's shard; acquire returns the whole
// parameter, all-gathered from every rank's shard into a device buffer on
// the communication stream. The walk above fetches the shard; a second
// stage gathers, in order, the sharded parameters within
// `device_lookahead` whose full buffers fit in `prefetch_bytes` (counting
// the full buffers gathered ahead and not yet acquired), stopping at the
// first that does not fit or is in use. These decisions use only what
// every rank sees alike (the order, the cursor, byte counts), never local
// memory, so every rank queues the same all-gathers in the same order, as
// a collective needs: each rank must make the same acquires and releases
// of sharded parameters in the same order, from one thread (or ordered
// between its threads). At its last release a full buffer is freed in
// stream order (resharded), unless the order needs it again within
// `reuse_distance` bytes: then it is kept for that use, within the step.
// end_step frees every full buffer held and leaves the next step's gathers
// to begin_step: the shards may be updated in between (the optimizer
// step), and a full buffer from before would be stale.
//
// Thread safety: every member may be called concurrently. acquire and
// release call the residency manager with no prefetcher lock held; one
// mutex serializes the scheduler's walks, and a leaf mutex guards the order
// (the eviction oracle takes only that one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/communicator.hpp"
#include "strata/counter_list.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/prefetch_options.hpp"
#include "strata/residency.hpp"

namespace strata {

class access_order;
class shard_gathers;
struct access;

class STRATA_API prefetcher {
 public:
  /// A prefetcher over `buffers` (which must outlive it), configured by
  /// `options` (STRATA_CONF's prefetch section) and by the manager's
  /// host_lookahead. It becomes the manager's eviction oracle and adds the
  /// "prefetch" section to the allocator's stats. Errors: invalid_argument
  /// for options outside their ranges (check_prefetch_options).
  static result<std::unique_ptr<prefetcher>> create(residency_manager& buffers,
                                                    const prefetch_options& options = {});
  prefetcher(const prefetcher&) = delete;
  prefetcher& operator=(const prefetcher&) = delete;
  prefetcher(prefetcher&&) = delete;
  prefetcher& operator=(prefetcher&&) = delete;
  /// Restores least-recently-released eviction and removes the stats
  /// section. Fills it issued still complete (the manager owns them).
  ~prefetcher();

  /// A step begins: the first one records the order, later ones rewind the
  /// cursor to its start (and fetch ahead from there). Errors:
  /// invalid_argument if the step before was not ended.
  status begin_step();
  /// The step ends; the first one's recording becomes the order (an empty
  /// recording is dropped: the next step records again), and the full
  /// buffers held are freed. Errors: invalid_argument without a
  /// begin_step; the allocator's freeing a full buffer (the step has still
  /// ended and the next one's fills have started).
  status end_step();
  /// residency_manager::acquire(handle, stream, mode) (same result and
  /// errors), recorded or followed in the order, then the next buffers are
  /// fetched ahead. Outside begin_step/end_step nothing is recorded or
  /// followed.
  result<void*> acquire(std::uint64_t handle, void* stream,
                        access_mode mode = access_mode::read_write);
  /// residency_manager::release(handle, stream).
  status release(std::uint64_t handle, void* stream);
  /// residency_manager::acquire_host(handle, mode) (same result and
  /// errors; the host waits for the bytes), recorded or followed in the
  /// order as a host hold, then the next buffers are fetched ahead: later
  /// steps read this one from NVMe into host memory before its hold (within
  /// host_lookahead), never to the device. A sharded parameter's hold is
  /// of its shard.
  result<void*> acquire_host(std::uint64_t handle, access_mode mode = access_mode::read_write);
  /// residency_manager::release_host(handle).
  status release_host(std::uint64_t handle);
  /// A hint: fetch `handle` to the device now, within the budgets, whether
  /// or not an order is recorded. Not issuing (over the budgets, no room,
  /// already there) is not an error; it is counted. Errors: invalid_argument
  /// (unknown handle), device errors queueing the copy.
  status prefetch(std::uint64_t handle);

  /// Makes `handle` (a buffer of the residency manager: this rank's shard,
  /// the same size on every rank) a sharded parameter: acquire(handle)
  /// returns the whole parameter, shard bytes x comm.size() (rank r's shard
  /// at r x shard bytes), all-gathered by `comm` on `comm_stream` as `type`
  /// elements (see above). Acquire it read_only: the full buffer is a copy,
  /// and writes to it are lost. Update the shard itself (the optimizer
  /// step) through the residency manager, outside the prefetcher's steps.
  /// Every rank adds the same parameters. Errors: invalid_argument (unknown
  /// handle, already sharded, a shard that is not whole `type` elements,
  /// `comm` on another device than the manager's, a `comm_stream` that
  /// device does not know: on sim, one it did not create), the device's.
  status add_sharded(std::uint64_t handle, communicator& comm, stream_handle comm_stream,
                     dtype type);

  /// The counters (counter_list.hpp): the residency manager's side of
  /// the fills is hits to wasted_bytes; step_bytes_* are the last ended
  /// step's.
#define STRATA_PREFETCHER_COUNTERS(X)                                                  \
  X(steps, "steps ended")                                                              \
  X(recorded, "accesses in the order")                                                 \
  X(in_order, "acquires that matched the order")                                       \
  X(resyncs, "acquires that re-synchronized the cursor")                               \
  X(unrecorded, "acquires of buffers not in the order")                                \
  X(issued_device, "fetches to the device issued")                                     \
  X(issued_host, "NVMe reads to the host issued")                                      \
  X(over_budget, "walks stopped by prefetch_bytes or prefetch_inflight")               \
  X(no_room, "fetches not issued for lack of memory")                                  \
  X(hints, "prefetch() calls")                                                         \
  X(hints_not_issued, "hints over budget, without room or not needed")                 \
  X(hits, "the residency manager's prefetch_hits")                                     \
  X(late_fills, "the residency manager's late_fills")                                  \
  X(stall_ns, "the residency manager's stall_ns")                                      \
  X(wasted, "the residency manager's prefetch_wasted")                                 \
  X(wasted_bytes, "the residency manager's prefetch_wasted_bytes")                     \
  X(step_bytes_to_host, "bytes spilled device -> host in the last ended step")         \
  X(step_bytes_to_nvme, "bytes spilled to NVMe in the last ended step")                \
  X(step_bytes_from_nvme, "bytes filled from NVMe in the last ended step")             \
  X(step_bytes_from_host, "bytes filled host -> device in the last ended step")        \
  X(gathers, "sharded parameters: all-gathers queued")                                 \
  X(gathers_ahead, "all-gathers queued ahead of their acquire")                        \
  X(gathers_reused, "acquires served by a full buffer kept within reuse_distance")     \
  X(reshards, "full buffers freed after release")                                      \
  X(gather_failures, "gathers that failed to queue (the acquire retries and reports)") \
  X(gathered_bytes, "device bytes of full buffers held now")
  struct counters {
    STRATA_PREFETCHER_COUNTERS(STRATA_COUNTER_MEMBER)
    /// The counters by name (the "prefetch" stats section).
    [[nodiscard]] stat_map to_map() const {
      return {STRATA_PREFETCHER_COUNTERS(STRATA_COUNTER_ENTRY)};
    }
  };
  [[nodiscard]] counters stats();

 private:
  prefetcher(residency_manager& buffers, const prefetch_options& options);
  // Fetches ahead from the cursor (see above); `gather`: sharded
  // parameters' gathers too. Needs walk_mu_.
  void schedule(bool gather = true);
  struct ahead {
    std::uint64_t handle;
    std::uint64_t distance;  // bytes of accesses before it, from the cursor
    bool on_host;            // a host hold: fetched to the host only
  };
  // An access of `bytes` to `handle` made in a step: recorded (the first
  // step) or followed, then the walk ahead.
  void note(std::uint64_t handle, void* stream, std::uint64_t bytes, bool on_host);
  // The gather stage of a walk over `window` (see above). Needs walk_mu_.
  void gather_ahead(const std::vector<ahead>& window);

  residency_manager& buffers_;
  std::uint64_t prefetch_bytes_;
  std::uint64_t inflight_;
  std::uint64_t host_lookahead_;
  std::uint64_t host_hold_lookahead_;  // host_lookahead, at most 1/8 of a capped host tier
  std::uint64_t device_lookahead_;
  std::uint64_t reuse_distance_;
  std::uint64_t stats_source_ = 0;
  std::mutex walk_mu_;  // one scheduler walk at a time; held while calling the manager
  std::unique_ptr<shard_gathers> shards_;  // guarded by walk_mu_
  std::mutex order_mu_;  // leaf: guards everything below; never held while calling the manager
  std::unique_ptr<access_order> order_;
  std::vector<access> recording_;  // the first step's acquires, until it ends
  bool in_step_ = false;
  bool logged_this_step_ = false;
  counters stats_;
  residency_manager::counters step_start_{};
};

}  // namespace strata
