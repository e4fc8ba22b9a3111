#include "plan/layer_activations.hpp"

namespace strata::plan {

namespace {

// Under torch.autocast (bf16) with fp32 weights, as PyTorch 2.11 and
// transformers 5 keep them (docs/plan.md, "Activations under amp"; the
// H100 snapshots of GPT-2 and Qwen2.5-0.5B, allocation by allocation):
// the residual stream is fp32 (4 bytes), each linear casts its input and
// its weight to bf16 and keeps both, matmul outputs are bf16, norms and
// ops autocast lists as fp32 (pow, tanh, softmax, the norms' statistics)
// make fp32 tensors, and transformers' key/value cache holds each layer's
// K and V unless checkpointing turns it off.
std::vector<layer_op> amp_layer_ops(const plan_setup& s) {
  const model_shape& m = s.model;
  const std::uint64_t t = s.micro_batch * s.seq;  // tokens
  const std::uint64_t h = m.hidden;
  const std::uint64_t f = m.ffn;
  const std::uint64_t kv = kv_width(m);
  const std::uint64_t scores = m.heads * s.seq * t;
  const bool cache = !s.checkpointing;
  std::vector<layer_op> out;
  const auto keep = [&](std::uint64_t bytes) { out.push_back({bytes, true}); };
  const auto pass = [&](std::uint64_t bytes) { out.push_back({bytes, false}); };
  const auto cast = [&](std::uint64_t bytes) { out.push_back({bytes, true, true}); };
  const auto attention = [&] {
    if (s.flash_attention) {
      keep(2 * t * h);        // output, the o projection's input
      keep(4 * t * m.heads);  // log-sum-exp, fp32
    } else {
      pass(2 * scores);              // Q K^T, bf16
      keep(4 * scores);              // softmax output, fp32 (autocast)
      if (m.out_bias) keep(scores);  // its dropout mask
      keep(2 * scores);              // probabilities cast for the matmul with V
      keep(2 * t * h);               // output
    }
  };
  const std::uint64_t bias = m.out_bias ? 2 : 0;  // bytes of a bias element's cast
  if (!m.gated_ffn) {
    // GPT-2 family: LayerNorm (mean and rstd kept, fp32; its fp32 output
    // passes to the next linear's cast), fused QKV, dropout masks, the
    // tanh GeLU (three fp32 intermediates and a bf16 one kept, five fp32
    // ones passing).
    pass(4 * t * h);                                   // ln_1's output
    keep(8 * t);                                       // its mean and rstd
    cast(2 * h * (h + 2 * kv) + bias * (h + 2 * kv));  // c_attn's weight cast
    keep(2 * t * h);                                   // its input cast
    keep(2 * t * (h + 2 * kv));                        // Q, K, V
    if (cache) {
      keep(2 * t * kv);  // the cache's K
      keep(2 * t * kv);  // and V
    }
    attention();
    cast(2 * h * h + bias * h);  // c_proj's weight cast
    pass(2 * t * h);             // its output
    keep(t * h);                 // attention dropout mask
    pass(2 * t * h);             // the dropped output
    keep(4 * t * h);             // residual, fp32
    pass(4 * t * h);             // ln_2's output
    keep(8 * t);                 // its mean and rstd
    cast(2 * h * f + bias * f);  // c_fc's weight cast
    keep(2 * t * h);             // its input cast
    pass(2 * t * f);             // its output
    keep(2 * t * f);             // the GeLU: 0.5 x, bf16
    keep(4 * t * f);             // x^3, fp32
    pass(4 * t * f);
    pass(4 * t * f);
    pass(4 * t * f);
    keep(4 * t * f);  // tanh's input and output, fp32
    keep(4 * t * f);
    pass(4 * t * f);
    cast(2 * f * h + bias * h);  // c_proj's weight cast
    keep(2 * t * f);             // its input cast
    pass(2 * t * h);             // its output
    keep(t * h);                 // MLP dropout mask
    pass(2 * t * h);             // the dropped output
    keep(4 * t * h);             // residual, fp32
  } else {
    // Llama family: RMSNorm (its fp32 output and rstd kept), separate Q,
    // K and V projections each casting the fp32 norm output, rotary
    // embedding in fp32, SwiGLU.
    const std::uint64_t qkv_bias = m.qkv_bias ? 2 : 0;
    pass(4 * t * h);                   // the input norm's square
    keep(4 * t);                       // its rstd
    keep(4 * t * h);                   // its output, fp32
    cast(2 * h * h + qkv_bias * h);    // Q projection's weight cast
    keep(2 * t * h);                   // its input cast
    pass(2 * t * h);                   // Q
    cast(2 * h * kv + qkv_bias * kv);  // K projection's weight cast
    keep(2 * t * h);                   // its input cast
    pass(2 * t * kv);                  // K
    cast(2 * h * kv + qkv_bias * kv);  // V projection's weight cast
    keep(2 * t * h);                   // its input cast
    pass(2 * t * kv);                  // V
    pass(4 * t * h);                   // Q after rotary, fp32
    pass(4 * t * h);                   // rotate_half(Q) x sin
    pass(4 * t * kv);                  // K after rotary, fp32
    if (cache) {
      keep(4 * t * kv);  // the cache's K
      keep(4 * t * kv);  // and V
    }
    keep(2 * t * h);   // Q cast for attention
    keep(2 * t * kv);  // K
    keep(2 * t * kv);  // V
    attention();
    cast(2 * h * h);  // o projection's weight cast
    pass(2 * t * h);  // its output
    keep(4 * t * h);  // residual, fp32
    pass(4 * t * h);  // the post-attention norm's square
    keep(4 * t);      // its rstd
    keep(4 * t * h);  // its output, fp32
    cast(2 * h * f);  // gate's weight cast
    keep(2 * t * h);  // its input cast
    keep(2 * t * f);  // gate
    keep(2 * t * f);  // SiLU
    cast(2 * h * f);  // up's weight cast
    keep(2 * t * h);  // its input cast
    keep(2 * t * f);  // up
    keep(2 * t * f);  // their product
    cast(2 * f * h);  // down's weight cast
    pass(2 * t * h);  // its output
    keep(4 * t * h);  // residual, fp32
  }
  if (s.lora_rank > 0) {
    const std::uint64_t adapters = 4 + (s.lora_mlp ? (m.gated_ffn ? 3 : 2) : 0);
    keep(2 * t * s.lora_rank * adapters);
  }
  return out;
}

std::vector<std::uint64_t> amp_layer_tensors(const plan_setup& s) {
  std::vector<std::uint64_t> kept;
  for (const layer_op& op : amp_layer_ops(s)) {
    if (op.kept) kept.push_back(op.bytes);
  }
  return kept;
}

}  // namespace

std::vector<std::uint64_t> layer_activation_tensors(const plan_setup& s) {
  if (s.dtype == precision::amp) return amp_layer_tensors(s);
  const model_shape& m = s.model;
  const std::uint64_t t = s.micro_batch * s.seq;  // tokens
  const std::uint64_t h = m.hidden;
  const std::uint64_t e = s.dtype == precision::fp32 ? 4 : 2;  // bytes per element
  const std::uint64_t scores = m.heads * s.seq * t;
  const bool dropout = m.out_bias;  // the GPT-2 family trains with dropout
  std::vector<std::uint64_t> out;
  // Attention.
  out.push_back(e * t * h);  // the norm's input
  out.push_back(e * t * h);  // its output, the QKV projections' input
  if (dropout) {
    out.push_back(e * t * 2 * h);  // Q and K
    out.push_back(e * t * h);      // V
  } else {
    out.push_back(e * t * h);            // Q
    out.push_back(e * t * kv_width(m));  // K
    out.push_back(e * t * kv_width(m));  // V
  }
  if (s.flash_attention) {
    out.push_back(4 * t * m.heads);  // log-sum-exp, fp32
  } else {
    out.push_back(e * scores);  // softmax output
    if (dropout) {
      out.push_back(scores);      // its dropout mask, one byte
      out.push_back(e * scores);  // the dropped output
    }
  }
  out.push_back(e * t * h);           // attention output, the o projection's input
  if (dropout) out.push_back(t * h);  // the attention's dropout mask
  // MLP.
  out.push_back(e * t * h);  // the norm's input
  out.push_back(e * t * h);  // its output, the first linear's input
  if (m.gated_ffn) {
    out.push_back(e * t * m.ffn);  // gate
    out.push_back(e * t * m.ffn);  // up
    out.push_back(e * t * m.ffn);  // SwiGLU output, the down projection's input
  } else {
    out.push_back(e * t * m.ffn);  // GeLU input
    out.push_back(e * t * m.ffn);  // GeLU output, the second linear's input
  }
  if (dropout) out.push_back(t * h);  // the MLP's dropout mask
  if (s.lora_rank > 0) {
    const std::uint64_t adapters = 4 + (s.lora_mlp ? (m.gated_ffn ? 3 : 2) : 0);
    out.push_back(e * t * s.lora_rank * adapters);
  }
  return out;
}

std::vector<layer_op> layer_forward_ops(const plan_setup& s) {
  if (s.dtype == precision::amp) return amp_layer_ops(s);
  std::vector<layer_op> ops;
  for (const std::uint64_t b : layer_activation_tensors(s)) ops.push_back({b, true});
  return ops;
}

std::uint64_t layer_activation_bytes(const plan_setup& s) {
  std::uint64_t sum = 0;
  for (const std::uint64_t b : layer_activation_tensors(s)) sum += b;
  return sum;
}

std::uint64_t korthikanti_layer_bytes(const plan_setup& s) {
  const auto sbh = static_cast<double>(s.micro_batch * s.seq * s.model.hidden);
  const double scores = s.flash_attention ? 0.0
                                          : 5.0 * static_cast<double>(s.model.heads * s.seq) /
                                                static_cast<double>(s.model.hidden);
  return static_cast<std::uint64_t>(sbh * (34.0 + scores));
}

}  // namespace strata::plan
