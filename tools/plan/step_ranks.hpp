// Runs one training step's compute, collectives and offload transfers on
// the job's GPUs: timing-only sim devices (docs/device.md, "Modeled time")
// joined by the `local` communicator, one host thread per rank (by default
// one rank stands for them all: default_simulated_ranks), and reads the
// step's time off their modeled clocks (docs/plan.md, "Step time").
//
// Each rank queues, per micro-batch, forward layer by layer and backward in
// reverse as modeled kernels (their FLOPs) on a compute stream; the
// collectives (ZeRO-3's all-gathers one layer ahead, the gradients'
// all-reduce or reduce-scatter after each layer's backward, ZeRO-1/2's
// parameter all-gather after the step, hybrid shard's all-reduce across
// nodes) on a communication stream; and the offload's PCIe copies and host
// work (CPU Adam, NVMe) on a copy stream, with events between the streams
// where the data depends.
//
// Thread safety: each call makes its own devices and threads; calls may
// run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/plan_setup.hpp"
#include "strata/error.hpp"

namespace strata::plan {

/// Which parts of the step take their modeled time; the others take none
/// (what a part costs is then the difference of two runs).
struct timed_parts {
  bool compute = true;      ///< kernels: FLOPs at the compute rate
  bool collectives = true;  ///< collectives: ring time at the link rate
  bool transfers = true;    ///< offload: PCIe copies, CPU Adam, NVMe
};

/// What ZeRO-3's parameters did in the measured step on rank 0, from the
/// prefetcher's and the residency manager's counters (all 0 otherwise).
struct parameter_traffic {
  std::uint64_t gathers = 0;          ///< all-gathers queued
  std::uint64_t gathers_ahead = 0;    ///< of those, before their acquire
  std::uint64_t gathers_reused = 0;   ///< acquires served by a kept full buffer
  std::uint64_t bytes_from_host = 0;  ///< shards filled host -> device
  std::uint64_t bytes_from_nvme = 0;  ///< shards read from NVMe
  std::uint64_t bytes_to_nvme = 0;    ///< shards written to NVMe (each also read back)
  std::uint64_t late_fills = 0;       ///< fills the acquiring stream waited for
};

struct step_run {
  double seconds = 0;  ///< the slowest rank's
  parameter_traffic params;
  /// The STRATA_CONF settings the run used that differ from the defaults
  /// (ZeRO-3 through the prefetcher), empty otherwise.
  std::string conf;
};

/// The most ranks run_step_ranks simulates by default: a bigger job's ranks
/// are alike, so these stand for all of them, in groups modeled at their
/// full size (local_comm_options::modeled_ranks); the step's time is the
/// same, and a plan of 4096 GPUs takes the time and memory of one.
inline constexpr std::size_t default_simulated_ranks = 1;

/// Runs two warm-up steps and one more, and returns that one's modeled
/// seconds on the slowest rank, from the end of the step before (every
/// stream done) to its own end: the first step records the prefetcher's
/// order and the gradient buckets' ready order, the second lays the
/// buckets out anew, and the third is what every later step is.
///
/// Under ZeRO-3 the parameters go through the residency manager and the
/// prefetcher (sharded_params.hpp), on devices with the room they need at
/// least, or `parameter_room` bytes (what the rest of the step leaves free
/// at its peak; the default: the GPU's usable memory) when that is more:
/// offloaded shards stay cached there until the gathers need the memory.
/// The allocators run with wait_before_grow:false. At most `simulated`
/// ranks run (at least 1; see default_simulated_ranks). Errors: the
/// device's, the communicator's, the manager's and the prefetcher's.
result<step_run> run_step_ranks(const plan_setup& s, timed_parts parts,
                                std::uint64_t parameter_room = ~std::uint64_t{0},
                                std::size_t simulated = default_simulated_ranks);

}  // namespace strata::plan
