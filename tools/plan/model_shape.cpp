#include "plan/model_shape.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace strata::plan {

namespace {

model_shape llama(std::string name, std::uint64_t layers, std::uint64_t hidden, std::uint64_t heads,
                  std::uint64_t kv, std::uint64_t ffn, std::uint64_t vocab, bool tied = false,
                  bool qkv_bias = false) {
  model_shape m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv;
  m.ffn = ffn;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  m.qkv_bias = qkv_bias;
  return m;
}

model_shape gpt2(std::string name, std::uint64_t layers, std::uint64_t hidden,
                 std::uint64_t heads) {
  model_shape m =
      llama(std::move(name), layers, hidden, heads, heads, 4 * hidden, 50257, true, true);
  m.gated_ffn = false;
  m.out_bias = true;
  m.positions = 1024;
  return m;
}

// The published configurations (each model's config.json).
const std::array<model_shape, 19>& presets() {
  static const std::array<model_shape, 19> all{
      llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000),
      llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000),
      llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000),
      llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256),
      llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256),
      llama("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, true, true),
      llama("qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, true, true),
      llama("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, true, true),
      llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, false, true),
      llama("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064, false, true),
      llama("qwen2.5-32b", 64, 5120, 40, 8, 27648, 152064, false, true),
      llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, false, true),
      // ChatGLM3-6B: multi-query attention with 2 groups, SwiGLU, bias on QKV.
      llama("chatglm3-6b", 28, 4096, 32, 2, 13696, 65024, false, true),
      gpt2("gpt2", 12, 768, 12),
      gpt2("gpt2-medium", 24, 1024, 16),
      gpt2("gpt2-large", 36, 1280, 20),
      gpt2("gpt2-xl", 48, 1600, 25),
      llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000),
      llama("llama2-34b", 48, 8192, 64, 8, 22016, 32000),
  };
  return all;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::span<const model_shape> model_presets() {
  return presets();
}

result<model_shape> find_model(std::string_view name) {
  const std::string want = lower(name);
  std::string names;
  for (const model_shape& m : presets()) {
    if (m.name == want) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  return status{errc::invalid_argument, "unknown model '" + std::string(name) +
                                            "': the presets are " + names +
                                            " (or give --layers, --hidden, ... for any shape)"};
}

status check_shape(const model_shape& m) {
  const auto bad = [&](const std::string& why) {
    return status{errc::invalid_argument, "model " + m.name + ": " + why};
  };
  // Bounds past every model trained today, small enough that no product
  // of them overflows and a plan's run stays short.
  const auto range = [&](const char* what, std::uint64_t v, std::uint64_t most) -> status {
    if (v >= 1 && v <= most) return {};
    return bad(std::string(what) + " must be from 1 to " + std::to_string(most) + ", not " +
               std::to_string(v));
  };
  if (auto s = range("layers (--layers)", m.layers, max_layers); !s) return s;
  if (auto s = range("hidden (--hidden)", m.hidden, max_hidden); !s) return s;
  if (m.heads == 0 || m.hidden % m.heads != 0) return bad("heads (--heads) must divide hidden");
  if (m.kv_heads == 0 || m.heads % m.kv_heads != 0) {
    return bad("kv_heads (--kv-heads) must divide heads");
  }
  if (auto s = range("ffn (--ffn)", m.ffn, max_ffn); !s) return s;
  if (auto s = range("vocab (--vocab)", m.vocab, max_vocab); !s) return s;
  return {};
}

std::uint64_t head_dim(const model_shape& m) {
  return m.hidden / m.heads;
}

std::uint64_t kv_width(const model_shape& m) {
  return m.kv_heads * head_dim(m);
}

std::uint64_t layer_params(const model_shape& m) {
  const std::uint64_t h = m.hidden;
  const std::uint64_t kv = kv_width(m);
  std::uint64_t p = 2 * h * h + 2 * h * kv;    // q, o; k, v
  if (m.qkv_bias) p += h + 2 * kv;             // q, k, v biases
  p += (m.gated_ffn ? 3 : 2) * h * m.ffn;      // gate, up, down
  p += 2 * h;                                  // two norms' weights
  if (m.out_bias) p += h + m.ffn + h + 2 * h;  // o, up, down biases; norm biases
  return p;
}

std::vector<std::uint64_t> layer_param_tensors(const model_shape& m) {
  const std::uint64_t h = m.hidden;
  const std::uint64_t kv = kv_width(m);
  std::vector<std::uint64_t> out;
  if (m.gated_ffn) {
    out = {h * h, h * kv, h * kv, h * h, h * m.ffn, h * m.ffn, m.ffn * h};
  } else {  // fused QKV, two FFN matrices
    out = {h * (h + 2 * kv), h * h, h * m.ffn, m.ffn * h};
  }
  std::uint64_t matrices = 0;
  for (const std::uint64_t n : out) matrices += n;
  // The vectors: biases and norms, one tensor each in PyTorch; small, so
  // counted as one here.
  out.push_back(layer_params(m) - matrices);
  return out;
}

std::vector<std::uint64_t> outer_param_tensors(const model_shape& m) {
  std::vector<std::uint64_t> out{m.vocab * m.hidden};
  if (m.positions > 0) out.push_back(m.positions * m.hidden);
  if (!m.tied_embeddings) out.push_back(m.vocab * m.hidden);
  std::uint64_t sum = 0;
  for (const std::uint64_t n : out) sum += n;
  out.push_back(outer_params(m) - sum);  // the final norm
  return out;
}

std::uint64_t outer_params(const model_shape& m) {
  std::uint64_t p = m.vocab * m.hidden + m.positions * m.hidden + m.hidden;
  if (m.out_bias) p += m.hidden;  // the final LayerNorm's bias
  if (!m.tied_embeddings) p += m.vocab * m.hidden;
  return p;
}

std::uint64_t total_params(const model_shape& m) {
  return m.layers * layer_params(m) + outer_params(m);
}

std::uint64_t largest_module_params(const model_shape& m) {
  return std::max({m.vocab * m.hidden, m.hidden * m.ffn, m.hidden * m.hidden});
}

}  // namespace strata::plan
