// The tensors one transformer layer makes in forward and those it saves
// for backward, per micro-batch (docs/plan.md, "Activations"), op by op as
// PyTorch and transformers make them. With T = batch x seq tokens, a
// heads, s the sequence:
//
//   amp (autocast bf16 over fp32 weights): from the H100 snapshots,
//   allocation by allocation: an fp32 residual stream, each linear's bf16
//   casts of its input and weight, fp32 norm, pow, tanh and softmax outputs.
//   fp32 and bf16 (no autocast): what autograd saves, in 4 or 2 bytes an
//   element (statistics fp32, dropout masks one byte); GPT-2's tanh GeLU
//   is elementwise ops that keep five tensors where a fused one keeps two,
//   so a GPT-2 layer keeps Korthikanti et al.'s T h (34 + 5 a s / h) bytes
//   ("Reducing Activation Recomputation in Large Transformer Models", MLSys
//   2023, 4.1) plus 28 T h in bf16 (that GeLU, and the key/value cache's
//   copies of K and V, which checkpointing turns off).
//   Flash attention (the default; fp32 runs the memory-efficient kernel)
//   keeps no s x s scores, only the output and the log-sum-exp (4 a T
//   bytes); eager attention keeps the softmax output (and, with dropout,
//   its mask and the dropped output).
//   LoRA adds each adapter's low-rank activation (T r).
//   Checkpointing keeps only the layer's input and recomputes the rest in
//   backward, one layer at a time.
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
/// nothing is kept (a checkpointed forward), if the weight requires grad
/// (not LoRA's frozen base); `cached` marks a copy of K or
/// V in transformers' key/value cache, which the model's output holds as
/// long as a training loop keeps that output (kept too).
/// `for_weight` marks a tensor autograd keeps only for a weight's gradient
/// (a linear's input, a norm's normalized input): with LoRA's frozen base
/// it is kept only where an adapter takes it (layer_forward_ops makes it
/// passing elsewhere), as autograd saves an input only for a gradient it
/// computes.
enum class weight_kind : std::uint8_t { none, attention, ffn, norm };
struct layer_op {
  std::uint64_t bytes;
  bool kept;
  bool weight_cast = false;
  bool cached = false;
  weight_kind for_weight = weight_kind::none;
};
/// The layer's forward tensors in order, those kept and those passing, as
/// PyTorch makes them.
std::vector<layer_op> layer_forward_ops(const plan_setup& s);
/// Their sum.
std::uint64_t layer_activation_bytes(const plan_setup& s);
/// Korthikanti et al.'s count for the layer, T h (34 + 5 a s / h) bytes,
/// with flash attention T h 34 (the 5 a s / h term is the scores').
std::uint64_t korthikanti_layer_bytes(const plan_setup& s);

}  // namespace strata::plan
