#include "plan/plan_setup.hpp"

#include <array>
#include <cstdio>
#include <utility>

#include "strata/option_table.hpp"

namespace strata::plan {

std::string format_rate(double v) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%g", v);
  return text.data();
}

status check_setup(const plan_setup& s) {
  const auto bad = [](const std::string& why) { return status{errc::invalid_argument, why}; };
  if (auto c = check_shape(s.model); !c) return c;
  const auto range = [&](const char* flag, std::uint64_t v, std::uint64_t most) -> status {
    if (v >= 1 && v <= most) return {};
    return bad(std::string(flag) + " must be from 1 to " + std::to_string(most) + ", not " +
               std::to_string(v));
  };
  if (auto r = range("--gpus", s.gpus, max_gpus); !r) return r;
  if (s.nodes == 0 || s.gpus % s.nodes != 0) {
    return bad("--nodes must divide --gpus (" + std::to_string(s.gpus) + " GPUs on " +
               std::to_string(s.nodes) + " nodes)");
  }
  if (auto r = range("--batch", s.micro_batch, max_micro_batch); !r) return r;
  if (auto r = range("--seq", s.seq, max_seq); !r) return r;
  if (auto r = range("--grad-accum", s.grad_accum, max_grad_accum); !r) return r;
  if (s.gpu_memory > max_gpu_memory) {
    return bad("--gpu-memory " + format_bytes(s.gpu_memory) + " is more than " +
               format_bytes(max_gpu_memory));
  }
  for (const auto& [flag, v] :
       {std::pair{"--tflops", s.rates.tflops}, std::pair{"--hbm-gbps", s.rates.hbm_gbps},
        std::pair{"--nvlink-gbps", s.rates.nvlink_gbps},
        std::pair{"--network-gbps", s.rates.network_gbps},
        std::pair{"--pcie-gbps", s.rates.pcie_gbps}, std::pair{"--nvme-gbps", s.rates.nvme_gbps}}) {
    // Written to pass only a number in range: NaN fails it too.
    if (!(v >= min_rate && v <= max_rate)) {
      return bad(std::string(flag) + " must be from " + format_rate(min_rate) + " to " +
                 format_rate(max_rate) + ", not " + format_rate(v));
    }
  }
  if (s.zero < 0 || s.zero > 3) return bad("--zero must be 0 (DDP), 1, 2 or 3");
  if (s.hybrid_shard && s.zero != 3) return bad("--hybrid-shard needs --zero 3 (FSDP)");
  if (s.params != offload_to::none && s.zero != 3) {
    return bad("--offload-params needs --zero 3: only sharded parameters are fetched per layer");
  }
  if (s.optimizer != offload_to::none && s.zero == 0) {
    return bad("--offload-optimizer needs --zero 1, 2 or 3 (ZeRO-Offload partitions it first)");
  }
  if (s.lora_rank > 0 && s.lora_rank > s.model.hidden) {
    return bad("--lora rank " + std::to_string(s.lora_rank) + " is larger than hidden " +
               std::to_string(s.model.hidden));
  }
  if (s.gpu_memory <= s.context_memory) {
    return bad("--gpu-memory " + format_bytes(s.gpu_memory) +
               " is not more than the CUDA context's " + format_bytes(s.context_memory));
  }
  const std::uint64_t layer_bytes = layer_params(s.model) * weight_bytes(s.dtype);
  if (layer_bytes > s.gpu_memory - s.context_memory) {
    return bad("--gpu-memory " + format_bytes(s.gpu_memory) + " leaves " +
               format_bytes(s.gpu_memory - s.context_memory) + " after the CUDA context (" +
               "--context-memory " + format_bytes(s.context_memory) +
               "), smaller than one layer of " + s.model.name + " (" + format_bytes(layer_bytes) +
               " of parameters): no setup can run it");
  }
  return {};
}

bool gradients_made_in_backward(const plan_setup& s) {
  return (s.dtype == precision::amp || s.dtype == precision::fp32) && s.zero == 0 && s.gpus == 1;
}

std::uint64_t shard_ranks(const plan_setup& s) {
  return s.hybrid_shard ? s.gpus / s.nodes : s.gpus;
}

std::uint64_t trainable_params(const plan_setup& s) {
  if (s.lora_rank == 0) return total_params(s.model);
  const model_shape& m = s.model;
  const std::uint64_t r = s.lora_rank;
  const std::uint64_t h = m.hidden;
  const std::uint64_t kv = kv_width(m);
  std::uint64_t per_layer = r * (h + h) * 2 + r * (h + kv) * 2;  // q, o; k, v
  if (s.lora_mlp) per_layer += r * (h + m.ffn) * (m.gated_ffn ? 3 : 2);
  return per_layer * m.layers;
}

}  // namespace strata::plan
