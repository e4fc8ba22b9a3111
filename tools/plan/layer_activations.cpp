#include "plan/layer_activations.hpp"

namespace strata::plan {

std::vector<std::uint64_t> layer_activation_tensors(const plan_setup& s) {
  const model_shape& m = s.model;
  const std::uint64_t t = s.micro_batch * s.seq;  // tokens
  const std::uint64_t h = m.hidden;
  const std::uint64_t e = 2;  // bytes per 16-bit element
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
