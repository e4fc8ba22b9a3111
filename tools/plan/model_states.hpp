// Model states (parameters, gradients, optimizer state) per GPU: the
// tensors a plan holds for the whole step, where each lives, and the two
// published figures they are compared with (docs/plan.md, "Model states"):
//
//   ZeRO paper (Rajbhandari et al., SC'20, section 5; K = 12 for mixed-
//   precision Adam): DDP (2 + 2 + K)Psi; ZeRO-1 2Psi + 2Psi + K Psi/N;
//   ZeRO-2 2Psi + (2 + K)Psi/N; ZeRO-3 (2 + 2 + K)Psi/N.
//   DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py
//   estimate_zero2_model_states_mem_needs, stage3.py
//   estimate_zero3_model_states_mem_needs), GPU side: ZeRO-1/2 4Psi +
//   16Psi/N, with optimizer offload 2Psi; ZeRO-3 4L + 18Psi/N, with
//   optimizer offload 4L + 2Psi/N, with parameters offloaded too 4L (L:
//   the largest module's parameters, a working buffer); CPU side x1.5.
//
// Strata's tensors follow DeepSpeed's accounting: bf16 parameters (whole,
// or a 1/N partition under ZeRO-3), bf16 gradients (whole under ZeRO-1/2
// without offload; per layer and transient under ZeRO-3), and per
// partition fp32 master weights, Adam's two moments and (under ZeRO) an
// fp32 gradient. So their sum equals DeepSpeed's figure without its 4L
// working term, up to each tensor's rounding to whole elements.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan_setup.hpp"

namespace strata::plan {

enum class category : std::uint8_t {
  parameters,
  gradients,
  optimizer_state,
  activations,
  collective_buffers,
};
inline constexpr std::size_t category_count = 5;
const char* category_name(category c);

enum class place : std::uint8_t { gpu, host, nvme };

/// One tensor held for the whole step.
struct held_tensor {
  category what;
  place where;
  std::uint64_t bytes;
};

/// Every model-state tensor of one GPU, per layer and for the outer
/// parameters, in allocation order.
std::vector<held_tensor> model_state_tensors(const plan_setup& s);

/// Sums of model_state_tensors by place and category.
struct model_state_bytes {
  std::uint64_t gpu[category_count] = {};
  std::uint64_t host = 0;
  std::uint64_t nvme = 0;
  [[nodiscard]] std::uint64_t gpu_total() const;
};
model_state_bytes sum_model_states(const plan_setup& s);

/// A published figure for this setup, or `applies` false (LoRA: the
/// formulas assume every parameter trains; DeepSpeed has no DDP estimate).
struct published_figure {
  bool applies = false;
  std::uint64_t gpu = 0;      ///< bytes per GPU
  std::uint64_t working = 0;  ///< DeepSpeed's 4L term (included in gpu)
  std::uint64_t cpu = 0;      ///< DeepSpeed's CPU figure (per node)
  std::string formula;        ///< as written above, with the numbers
};
published_figure deepspeed_estimate(const plan_setup& s);
published_figure zero_paper_figure(const plan_setup& s);

}  // namespace strata::plan
