// A transformer's shape, the presets of common open models (their
// published configurations), and the parameter counts the plan uses.
//
// Counted per layer: attention (q and o: hidden x hidden; k and v: hidden x
// kv_heads x head_dim; their biases with qkv_bias, o's bias with
// out_bias), the FFN (gate, up and down of hidden x ffn when gated, else up
// and down, with biases when out_bias) and two norms (2 x hidden weights,
// biases too with out_bias: LayerNorm). Outside the layers: the token
// embedding (vocab x hidden), learned positions (positions x hidden), the
// final norm, and the LM head (vocab x hidden) unless tied.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/error.hpp"

namespace strata::plan {

struct model_shape {
  std::string name;
  std::uint64_t layers = 0;
  std::uint64_t hidden = 0;
  std::uint64_t heads = 0;
  std::uint64_t kv_heads = 0;  ///< grouped-query attention: fewer K/V heads
  std::uint64_t ffn = 0;       ///< the FFN's inner size
  std::uint64_t vocab = 0;
  bool tied_embeddings = false;
  bool gated_ffn = true;        ///< SwiGLU (gate, up, down); false: GPT-2's two matrices
  bool qkv_bias = false;        ///< Qwen, GPT-2
  bool out_bias = false;        ///< GPT-2: biases on o, the FFN, and LayerNorm
  std::uint64_t positions = 0;  ///< learned position embeddings (GPT-2); 0: rotary
};

/// The presets' names, e.g. "llama2-7b", "qwen2.5-7b", "chatglm3-6b", "gpt2".
std::span<const model_shape> model_presets();
/// The preset named `name` (case-insensitive). Errors: invalid_argument
/// listing the presets.
result<model_shape> find_model(std::string_view name);
/// The largest shapes a plan takes: past every model trained today, small
/// enough that no product of them overflows and a plan's run stays short.
inline constexpr std::uint64_t max_layers = 512;
inline constexpr std::uint64_t max_hidden = 65536;
inline constexpr std::uint64_t max_ffn = std::uint64_t{1} << 20;
inline constexpr std::uint64_t max_vocab = std::uint64_t{1} << 22;
/// invalid_argument naming the first field (and its flag) that is zero,
/// above its bound or inconsistent (heads not dividing hidden, kv_heads not
/// dividing heads).
status check_shape(const model_shape& m);

[[nodiscard]] std::uint64_t head_dim(const model_shape& m);
/// K (or V) projection width: kv_heads x head_dim.
[[nodiscard]] std::uint64_t kv_width(const model_shape& m);
/// One transformer layer's parameters.
[[nodiscard]] std::uint64_t layer_params(const model_shape& m);
/// A layer's parameter tensors, in elements, as PyTorch holds them (each
/// matrix, and the vectors of biases and norms); they add up to
/// layer_params.
[[nodiscard]] std::vector<std::uint64_t> layer_param_tensors(const model_shape& m);
/// The same outside the layers (embeddings, final norm, head); they add up
/// to outer_params.
[[nodiscard]] std::vector<std::uint64_t> outer_param_tensors(const model_shape& m);
/// Everything outside the layers (embeddings, final norm, untied head).
[[nodiscard]] std::uint64_t outer_params(const model_shape& m);
[[nodiscard]] std::uint64_t total_params(const model_shape& m);
/// The largest single module's parameters (DeepSpeed's
/// `largest_layer_params`: a module's own, not its children's).
[[nodiscard]] std::uint64_t largest_module_params(const model_shape& m);

}  // namespace strata::plan
