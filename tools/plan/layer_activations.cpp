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
  const auto cached = [&](std::uint64_t bytes) { out.push_back({bytes, true, false, true}); };
  const auto input = [&](std::uint64_t bytes, weight_kind w) {
    out.push_back({bytes, true, false, false, w});
  };
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
    input(2 * t * h, weight_kind::attention);          // its input cast
    keep(2 * t * (h + 2 * kv));                        // Q, K, V
    if (cache) {
      cached(2 * t * kv);  // the cache's K
      cached(2 * t * kv);  // and V
    }
    attention();
    cast(2 * h * h + bias * h);          // c_proj's weight cast
    pass(2 * t * h);                     // its output
    keep(t * h);                         // attention dropout mask
    pass(2 * t * h);                     // the dropped output
    keep(4 * t * h);                     // residual, fp32
    pass(4 * t * h);                     // ln_2's output
    keep(8 * t);                         // its mean and rstd
    cast(2 * h * f + bias * f);          // c_fc's weight cast
    input(2 * t * h, weight_kind::ffn);  // its input cast
    pass(2 * t * f);                     // its output
    keep(2 * t * f);                     // the GeLU: 0.5 x, bf16
    keep(4 * t * f);                     // x^3, fp32
    pass(4 * t * f);
    pass(4 * t * f);
    pass(4 * t * f);
    keep(4 * t * f);  // tanh's input and output, fp32
    keep(4 * t * f);
    pass(4 * t * f);
    cast(2 * f * h + bias * h);          // c_proj's weight cast
    input(2 * t * f, weight_kind::ffn);  // its input cast
    pass(2 * t * h);                     // its output
    keep(t * h);                         // MLP dropout mask
    pass(2 * t * h);                     // the dropped output
    keep(4 * t * h);                     // residual, fp32
  } else {
    // Llama family: RMSNorm (its fp32 output and rstd kept), separate Q,
    // K and V projections each casting the fp32 norm output, rotary
    // embedding in fp32, SwiGLU.
    const std::uint64_t qkv_bias = m.qkv_bias ? 2 : 0;
    pass(4 * t * h);                           // the input norm's square
    keep(4 * t);                               // its rstd
    input(4 * t * h, weight_kind::norm);       // its output, fp32
    cast(2 * h * h + qkv_bias * h);            // Q projection's weight cast
    input(2 * t * h, weight_kind::attention);  // its input cast
    pass(2 * t * h);                           // Q
    cast(2 * h * kv + qkv_bias * kv);          // K projection's weight cast
    input(2 * t * h, weight_kind::attention);  // its input cast
    pass(2 * t * kv);                          // K
    cast(2 * h * kv + qkv_bias * kv);          // V projection's weight cast
    input(2 * t * h, weight_kind::attention);  // its input cast
    pass(2 * t * kv);                          // V
    pass(4 * t * h);                           // Q after rotary, fp32
    pass(4 * t * h);                           // rotate_half(Q) x sin
    pass(4 * t * kv);                          // K after rotary, fp32
    if (cache) {
      cached(4 * t * kv);  // the cache's K
      cached(4 * t * kv);  // and V
    }
    keep(2 * t * h);   // Q cast for attention
    keep(2 * t * kv);  // K
    keep(2 * t * kv);  // V
    attention();
    cast(2 * h * h);                      // o projection's weight cast
    pass(2 * t * h);                      // its output
    keep(4 * t * h);                      // residual, fp32
    pass(4 * t * h);                      // the post-attention norm's square
    keep(4 * t);                          // its rstd
    input(4 * t * h, weight_kind::norm);  // its output, fp32
    cast(2 * h * f);                      // gate's weight cast
    input(2 * t * h, weight_kind::ffn);   // its input cast
    keep(2 * t * f);                      // gate
    keep(2 * t * f);                      // SiLU
    cast(2 * h * f);                      // up's weight cast
    input(2 * t * h, weight_kind::ffn);   // its input cast
    keep(2 * t * f);                      // up
    input(2 * t * f, weight_kind::ffn);   // their product, down's input
    cast(2 * f * h);                      // down's weight cast
    pass(2 * t * h);                      // its output
    keep(4 * t * h);                      // residual, fp32
  }
  if (s.lora_rank > 0) {
    const std::uint64_t adapters = 4 + (s.lora_mlp ? (m.gated_ffn ? 3 : 2) : 0);
    keep(2 * t * s.lora_rank * adapters);
  }
  return out;
}

// Without autocast, as autograd keeps it: fp32 training (4-byte tensors)
// or bf16 weights and activations (2-byte; DeepSpeed's and FSDP's bf16).
// No casts, so each linear keeps its input itself (one tensor for Q, K
// and V, or gate and up). Statistics and the log-sum-exp stay fp32,
// dropout masks one byte. Against the amp list: GPT-2's tanh GeLU keeps
// its input, tanh's output, 1 + tanh, 0.5 x and the product (each
// elementwise op saves what its backward needs; a scalar multiply saves
// nothing); RMSNorm keeps x * rstd (for the weight's multiply) and its
// output, and in bf16 its fp32 copy of x; rotary passes four tensors and
// keeps the rotated Q and K; the key/value cache copies K and V
// (transformers' DynamicCache concatenates onto an empty tensor). sdpa
// here is flash or the memory-efficient kernel (fp32): output and
// log-sum-exp.
std::vector<layer_op> plain_layer_ops(const plan_setup& s) {
  const model_shape& m = s.model;
  const std::uint64_t t = s.micro_batch * s.seq;  // tokens
  const std::uint64_t h = m.hidden;
  const std::uint64_t f = m.ffn;
  const std::uint64_t kv = kv_width(m);
  const std::uint64_t scores = m.heads * s.seq * t;
  const bool cache = !s.checkpointing;
  const std::uint64_t e = s.dtype == precision::fp32 ? 4 : 2;  // bytes per element
  std::vector<layer_op> out;
  const auto keep = [&](std::uint64_t bytes) { out.push_back({bytes, true}); };
  const auto pass = [&](std::uint64_t bytes) { out.push_back({bytes, false}); };
  const auto cached = [&](std::uint64_t bytes) { out.push_back({bytes, true, false, true}); };
  const auto input = [&](std::uint64_t bytes, weight_kind w) {
    out.push_back({bytes, true, false, false, w});
  };
  const auto attention = [&] {
    if (s.flash_attention) {
      keep(e * t * h);        // output, the o projection's input
      keep(4 * t * m.heads);  // log-sum-exp
    } else {
      pass(e * scores);  // Q K^T
      keep(e * scores);  // softmax output
      if (m.out_bias) {
        keep(scores);      // its dropout mask
        keep(e * scores);  // the dropped probabilities, for the matmul with V
      }
      keep(e * t * h);  // output, transposed for the o projection
    }
  };
  // transformers' RMSNorm: x in fp32, x * rstd, the weight's multiply.
  const auto rms_norm = [&](weight_kind consumers) {
    if (e == 2) {
      keep(4 * t * h);                      // x's fp32 copy, kept for x * rstd
      pass(4 * t * h);                      // its square
      keep(4 * t);                          // rstd
      pass(4 * t * h);                      // x * rstd
      input(2 * t * h, weight_kind::norm);  // cast back, kept for the weight's multiply
    } else {
      pass(4 * t * h);                      // the square
      keep(4 * t);                          // rstd
      input(4 * t * h, weight_kind::norm);  // x * rstd, kept for the weight's multiply
    }
    input(e * t * h, consumers);  // the output, the next linears' input
  };
  if (!m.gated_ffn) {
    input(e * t * h, weight_kind::attention);  // ln_1's output, c_attn's input
    keep(8 * t);                               // its mean and rstd
    keep(e * t * (h + 2 * kv));                // Q, K, V
    if (cache) {
      cached(e * t * kv);  // the cache's K
      cached(e * t * kv);  // and V
    }
    attention();
    pass(e * t * h);                     // c_proj's output
    keep(t * h);                         // dropout mask
    pass(e * t * h);                     // the dropped output
    keep(e * t * h);                     // residual
    input(e * t * h, weight_kind::ffn);  // ln_2's output, c_fc's input
    keep(8 * t);                         // its mean and rstd
    keep(e * t * f);                     // c_fc's output, the GeLU's x
    pass(e * t * f);                     // x^3
    pass(e * t * f);                     // 0.044715 x^3
    pass(e * t * f);                     // x + 0.044715 x^3
    pass(e * t * f);                     // tanh's input
    keep(e * t * f);                     // tanh's output
    keep(e * t * f);                     // 1 + tanh
    keep(e * t * f);                     // 0.5 x
    input(e * t * f, weight_kind::ffn);  // the GeLU's output, c_proj's input
    pass(e * t * h);                     // c_proj's output
    keep(t * h);                         // dropout mask
    pass(e * t * h);                     // the dropped output
    keep(e * t * h);                     // residual
  } else {
    rms_norm(weight_kind::attention);  // the input norm: the Q, K and V projections' input
    pass(e * t * h);                   // Q
    pass(e * t * h);                   // Q cos
    pass(e * t * h);                   // rotate_half(Q)
    pass(e * t * h);                   // rotate_half(Q) sin
    keep(e * t * h);                   // Q after rotary
    pass(e * t * kv);                  // K
    pass(e * t * kv);                  // K cos
    pass(e * t * kv);                  // rotate_half(K)
    pass(e * t * kv);                  // rotate_half(K) sin
    keep(e * t * kv);                  // K after rotary
    keep(e * t * kv);                  // V
    if (cache) {
      cached(e * t * kv);  // the cache's K
      cached(e * t * kv);  // and V
    }
    attention();
    pass(e * t * h);                     // o projection's output
    keep(e * t * h);                     // residual
    rms_norm(weight_kind::ffn);          // the post-attention norm: gate's and up's input
    keep(e * t * f);                     // gate
    keep(e * t * f);                     // SiLU
    keep(e * t * f);                     // up
    input(e * t * f, weight_kind::ffn);  // their product, down's input
    pass(e * t * h);                     // down's output
    keep(e * t * h);                     // residual
  }
  if (s.lora_rank > 0) {
    const std::uint64_t adapters = 4 + (s.lora_mlp ? (m.gated_ffn ? 3 : 2) : 0);
    keep(e * t * s.lora_rank * adapters);
  }
  return out;
}

}  // namespace

std::vector<std::uint64_t> layer_activation_tensors(const plan_setup& s) {
  std::vector<std::uint64_t> kept;
  for (const layer_op& op : layer_forward_ops(s)) {
    if (op.kept) kept.push_back(op.bytes);
  }
  return kept;
}

std::vector<layer_op> layer_forward_ops(const plan_setup& s) {
  std::vector<layer_op> ops = s.dtype == precision::amp ? amp_layer_ops(s) : plain_layer_ops(s);
  if (s.lora_rank == 0) return ops;
  // LoRA freezes the base: autograd keeps an input only for a gradient it
  // computes, so a tensor kept for a weight's gradient stays only where an
  // adapter takes it (the attention's linears; the FFN's with --lora-mlp).
  for (layer_op& op : ops) {
    const bool adapted = op.for_weight == weight_kind::attention ||
                         (op.for_weight == weight_kind::ffn && s.lora_mlp);
    if (op.for_weight != weight_kind::none && !adapted) op.kept = false;
  }
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
