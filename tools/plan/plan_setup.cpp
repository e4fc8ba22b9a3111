#include "plan/plan_setup.hpp"

#include "strata/option_table.hpp"

namespace strata::plan {

status check_setup(const plan_setup& s) {
  const auto bad = [](const std::string& why) { return status{errc::invalid_argument, why}; };
  if (auto c = check_shape(s.model); !c) return c;
  if (s.gpus == 0) return bad("--gpus must be at least 1");
  if (s.nodes == 0 || s.gpus % s.nodes != 0) {
    return bad("--nodes must divide --gpus (" + std::to_string(s.gpus) + " GPUs on " +
               std::to_string(s.nodes) + " nodes)");
  }
  if (s.micro_batch == 0) return bad("--batch must be at least 1");
  if (s.seq == 0) return bad("--seq must be at least 1");
  if (s.grad_accum == 0) return bad("--grad-accum must be at least 1");
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
  const std::uint64_t layer_bytes = layer_params(s.model) * (s.dtype == precision::fp32 ? 4 : 2);
  if (layer_bytes > s.gpu_memory - s.context_memory) {
    return bad("--gpu-memory " + format_bytes(s.gpu_memory) + " is smaller than one layer of " +
               s.model.name + " (" + format_bytes(layer_bytes) +
               " of parameters): no setup can run it");
  }
  return {};
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
