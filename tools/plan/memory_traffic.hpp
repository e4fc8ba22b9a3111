// What the step's memory-bound kernels move (docs/plan.md, "Step time").
// A training step is not all matmuls: on an H100 GPT-2's step is 25 ms of
// matmuls and attention and 42 ms of elementwise, normalization, softmax,
// cast and optimizer kernels (the shared profiler trace), which move bytes
// and do little arithmetic. Their time is these bytes at the achieved
// memory rate (hardware_rates::hbm_gbps).
//
// Counted per tensor a layer's forward makes (layer_forward_ops): written
// once and read once by the memory-bound kernels around it; backward moves
// twice what forward does (the gradient of each tensor, and the saved
// tensors read again). The loss section, per logit: the cast to fp32, the
// shifted copy and log-softmax forward (with its max and sum passes), then
// backward. The optimizer: PyTorch's foreach AdamW over fp32 state, about
// 80 bytes a parameter (measured 74 on the H100 trace: 3.7 ms for 124 M
// parameters at its elementwise rate).
//
// Thread safety: pure functions.
#pragma once

#include "plan/plan_setup.hpp"

namespace strata::plan {

struct memory_traffic {
  double layer = 0;                ///< bytes one layer's forward moves, one micro-batch
  double head = 0;                 ///< the embeddings, LM head and loss, one micro-batch
  double optimizer_per_param = 0;  ///< the optimizer step, bytes per trainable parameter
};

/// Backward moves this many times forward's bytes.
inline constexpr double backward_traffic = 2.0;

/// The setup's traffic.
[[nodiscard]] memory_traffic memory_traffic_of(const plan_setup& s);

}  // namespace strata::plan
