// The tensors one transformer layer saves in forward for backward, per
// micro-batch (docs/plan.md, "Activations"), in 16-bit elements unless
// named otherwise. With T = batch x seq tokens, a heads, s the sequence:
//
//   GPT-2 family (LayerNorm, GeLU, dropout): Korthikanti et al., "Reducing
//   Activation Recomputation in Large Transformer Models" (MLSys 2023),
//   section 4.1, term by term: attention 11 T h + 5 a s T (two norm inputs
//   4 T h more), MLP 19 T h: in all T h (34 + 5 a s / h) bytes.
//   Llama family (RMSNorm, SwiGLU, grouped K/V, no dropout): the two norm
//   inputs and outputs, Q, K, V, the attention output, the gate, up and
//   SwiGLU outputs.
//   Flash attention (the default) keeps no s x s scores, only the
//   log-sum-exp (4 a T bytes); eager attention keeps the softmax output
//   (and, with dropout, its mask and the dropped output).
//   LoRA adds each adapter's low-rank activation (T r).
//   Checkpointing keeps only the layer's input (T h) and recomputes the
//   rest in backward, one layer at a time.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan_setup.hpp"

namespace strata::plan {

/// The bytes of each tensor a layer saves (no checkpointing).
std::vector<std::uint64_t> layer_activation_tensors(const plan_setup& s);
/// A tensor a layer's forward makes: kept for backward, or passing (freed
/// once the next tensor is made); `weight_cast` marks a weight's bf16 cast
/// under amp, which autocast's cache holds until autocast exits even where
/// nothing is kept (a checkpointed forward).
struct layer_op {
  std::uint64_t bytes;
  bool kept;
  bool weight_cast = false;
};
/// The layer's forward tensors in order: under amp those kept and those
/// passing, as PyTorch makes them; otherwise the kept ones.
std::vector<layer_op> layer_forward_ops(const plan_setup& s);
/// Their sum.
std::uint64_t layer_activation_bytes(const plan_setup& s);
/// Korthikanti et al.'s count for the layer, T h (34 + 5 a s / h) bytes,
/// with flash attention T h 34 (the 5 a s / h term is the scores').
std::uint64_t korthikanti_layer_bytes(const plan_setup& s);

}  // namespace strata::plan
