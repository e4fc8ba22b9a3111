// Runs one training step's compute, collectives and offload transfers on
// every GPU of the job: N timing-only sim devices (docs/device.md, "Modeled
// time") joined by the `local` communicator, one host thread per rank, and
// reads the step's time off their modeled clocks (docs/plan.md, "Step
// time").
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

/// The step's modeled seconds: the latest rank's clock once every stream
/// has finished. Errors: the device's and the communicator's.
result<double> run_step_ranks(const plan_setup& s, timed_parts parts);

}  // namespace strata::plan
