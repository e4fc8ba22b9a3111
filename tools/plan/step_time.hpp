// The step-time model (docs/plan.md, "Step time"): compute from FLOP
// counts at the achieved rate, collectives and offload transfers from
// their bytes at the link rates, and what of them compute cannot hide.
//
//   compute      per micro-batch: forward 2 P T + 4 L b s^2 h (attention),
//                backward twice that (LoRA: once, for the activations'
//                gradients, the adapters' own negligible), checkpointing
//                one forward more; fp32 at 1/8 of the bf16 rate.
//   collectives  ring algorithms: all-reduce 2 (n - 1)/n of the gradients
//                (DDP), reduce-scatter and all-gather (n - 1)/n each
//                (ZeRO-1/2: gradients, then parameters after the step);
//                ZeRO-3 all-gathers every layer in forward and in
//                backward and reduce-scatters its gradients. Gradient
//                reductions overlap backward, ZeRO-3's gathers the layers
//                before them: exposed is what exceeds that compute, plus
//                the last bucket (one layer); ZeRO-1/2's parameter
//                all-gather after the step is exposed.
//   offload      optimizer to host: bf16 gradients down and parameters up
//                over PCIe and the CPU's Adam; to NVMe also the fp32 state
//                (12 bytes a parameter) read and written per step, shared
//                by a node's GPUs; parameters on the host cross PCIe for
//                each forward and backward use, prefetched under compute.
//
// Thread safety: pure functions.
#pragma once

#include "plan/plan_setup.hpp"

namespace strata::plan {

struct step_time {
  double compute = 0;              ///< seconds
  double exposed_collectives = 0;  ///< collective time compute does not hide
  double exposed_transfers = 0;    ///< offload transfers and the host optimizer not hidden
  double collectives = 0;          ///< all collective time, hidden or not
  double transfers = 0;            ///< all offload time, hidden or not
  [[nodiscard]] double total() const { return compute + exposed_collectives + exposed_transfers; }
};

step_time estimate_step_time(const plan_setup& s);

}  // namespace strata::plan
