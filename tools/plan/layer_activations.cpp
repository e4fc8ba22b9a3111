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
std::vector<std::uint64_t> amp_layer_tensors(const plan_setup& s) {
  const model_shape& m = s.model;
  const std::uint64_t t = s.micro_batch * s.seq;  // tokens
  const std::uint64_t h = m.hidden;
  const std::uint64_t f = m.ffn;
  const std::uint64_t kv = kv_width(m);
  const std::uint64_t scores = m.heads * s.seq * t;
  const bool cache = !s.checkpointing;
  std::vector<std::uint64_t> out;
  const auto attention = [&] {
    if (s.flash_attention) {
      out.push_back(2 * t * h);        // output, the o projection's input
      out.push_back(4 * t * m.heads);  // log-sum-exp, fp32
    } else {
      out.push_back(4 * scores);              // softmax output, fp32 (autocast)
      if (m.out_bias) out.push_back(scores);  // its dropout mask
      out.push_back(2 * scores);              // probabilities cast for the matmul with V
      out.push_back(2 * t * h);               // output
    }
  };
  if (!m.gated_ffn) {
    // GPT-2 family: LayerNorm (mean and rstd kept, fp32), fused QKV,
    // dropout masks, the tanh GeLU (three fp32 intermediates and a bf16
    // one).
    out.push_back(8 * t);                  // ln_1's mean and rstd
    out.push_back(2 * t * h);              // c_attn's input cast
    out.push_back(2 * t * (h + 2 * kv));   // Q, K, V
    if (cache) out.push_back(4 * t * kv);  // the cache's K and V
    attention();
    out.push_back(t * h);       // attention dropout mask
    out.push_back(4 * t * h);   // residual, fp32
    out.push_back(8 * t);       // ln_2's mean and rstd
    out.push_back(2 * t * h);   // c_fc's input cast
    out.push_back(14 * t * f);  // the GeLU's bf16 and three fp32 intermediates
    out.push_back(2 * t * f);   // c_proj's input cast
    out.push_back(t * h);       // MLP dropout mask
    out.push_back(4 * t * h);   // residual, fp32
  } else {
    // Llama family: RMSNorm (its fp32 output and rstd kept), separate Q,
    // K and V projections each casting the fp32 norm output, rotary
    // embedding in fp32, SwiGLU.
    out.push_back(4 * t * h + 4 * t);       // input norm
    out.push_back(6 * t * h);               // Q, K and V projections' input casts
    if (cache) out.push_back(8 * t * kv);   // the cache's K and V, fp32 after rotary
    out.push_back(2 * t * h + 4 * t * kv);  // Q, K and V cast for attention
    attention();
    out.push_back(4 * t * h);          // residual, fp32
    out.push_back(4 * t * h + 4 * t);  // post-attention norm
    out.push_back(4 * t * h);          // gate and up projections' input casts
    out.push_back(8 * t * f);          // gate, SiLU, up and their product
    out.push_back(4 * t * h);          // residual, fp32
  }
  out.push_back(2 * layer_params(m));  // the weights' bf16 casts, kept for backward
  if (s.lora_rank > 0) {
    const std::uint64_t adapters = 4 + (s.lora_mlp ? (m.gated_ffn ? 3 : 2) : 0);
    out.push_back(2 * t * s.lora_rank * adapters);
  }
  return out;
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
