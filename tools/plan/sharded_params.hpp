// ZeRO-3's parameters on one rank of the step-time run, through Strata's
// residency manager and prefetcher (docs/plan.md, "Step time"), as a job
// using Strata would run them:
//
// - each unit's shard (this rank's part of a layer's, or the embeddings'
//   and head's, parameters) is a managed buffer: pinned on the device; or,
//   with the parameters in host memory, evictable to it (host_only); or,
//   with the parameters on NVMe, evictable to the manager's modeled NVMe
//   tier (offload option nvme_model, at the rank's share of the node's
//   NVMe rate) through a host tier of three of the largest shards;
//   offloaded shards start there;
// - with more than one rank it is a sharded parameter (add_sharded), so an
//   acquire returns the unit's whole parameters, all-gathered by the
//   group's communicator on the communication stream into a full buffer
//   from the rank's allocator;
// - the prefetcher records the first step's acquires; from the second step
//   on it fills the next unit's shard (from host memory or NVMe) and
//   gathers it ahead, and the order is the manager's eviction oracle.
//
// The prefetch settings are the plan's (docs/plan.md): device_lookahead =
// the smallest unit's full bytes (rounded down to whole MiB), so only the
// next unit is within it (its distance is 0, the one after it is a unit
// away): its shard is filled and it is gathered ahead, so two units'
// parameters are live at most, as in the memory run's schedule;
// prefetch_bytes = the largest unit's full bytes (rounded up to whole
// MiB), so any unit may be; the other keys keep their defaults.
//
// On a timing-only device the host tier's memory is address space of the
// sim device (mmap'ed MAP_NORESERVE, never touched: a copy moves no bytes
// and a read-only acquire spills with no copy), and the modeled NVMe tier
// writes nothing, so a 70B model's shards cost no resident memory here.
//
// Thread safety: none; one rank's thread uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "plan/plan_setup.hpp"
#include "strata/communicator.hpp"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"

namespace strata::plan {

/// The settings of the tiers and of the prefetcher a plan runs with.
struct offload_settings {
  tier_options tiers;
  prefetch_options prefetch;
};

/// The offload settings above for units of `shard_bytes` sharded over
/// `ranks`, living at `where`: the prefetcher's, and on NVMe the host
/// tier's and the modeled NVMe tier's (at `nvme_gbps`).
offload_settings plan_offload_options(const std::vector<std::size_t>& shard_bytes,
                                      std::uint64_t ranks, offload_to where, double nvme_gbps);

class sharded_params {
 public:
  /// One buffer of `shard_bytes[u]` bytes per unit on `alloc`'s device,
  /// sharded over `group` (null: one rank, the shard is the whole unit) on
  /// `comm_stream` as `type` elements, living at `where` (none: the
  /// device), and spilled there before the first step; `nvme_gbps`: the
  /// modeled NVMe tier's rate (0: instant). Throws strata::error (the
  /// manager's, the prefetcher's, the device's).
  sharded_params(allocator& alloc, communicator* group, stream_handle comm_stream,
                 const std::vector<std::size_t>& shard_bytes, dtype type, offload_to where,
                 double nvme_gbps);
  sharded_params(const sharded_params&) = delete;
  sharded_params& operator=(const sharded_params&) = delete;
  sharded_params(sharded_params&&) = delete;
  sharded_params& operator=(sharded_params&&) = delete;
  ~sharded_params();

  /// prefetcher::begin_step / end_step. Throws strata::error.
  void begin_step();
  void end_step();
  /// Unit `u`'s whole parameters for work queued on `stream` from now on
  /// (read only); `release` ends that use after the work queued so far.
  /// Throws strata::error.
  void acquire(std::size_t u, stream_handle stream);
  void release(std::size_t u, stream_handle stream);

  /// The optimizer's update of unit `u`'s shard, between steps: acquired
  /// for writing through the manager on `stream` (filled first if it was
  /// spilled), written from `host` (a timing-only device reads no byte of
  /// it), released. Throws strata::error.
  void update(std::size_t u, stream_handle stream, const void* host);

  /// Waits for the NVMe reads queued so far (residency_manager::wait_for_reads).
  void wait_for_reads();

  /// What the prefetcher and the manager did (see prefetcher::counters).
  [[nodiscard]] prefetcher::counters stats();

 private:
  std::unique_ptr<residency_manager> manager_;
  std::unique_ptr<prefetcher> fetch_;
  std::vector<std::uint64_t> handles_;  // by unit
};

}  // namespace strata::plan
