#include "plan/model_states.hpp"

#include <algorithm>

#include "strata/option_table.hpp"

namespace strata::plan {

namespace {

std::uint64_t div_up(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

// Parameters of one unit (a layer, or the outer parameters), frozen and
// trainable, by which the tensors are laid out: FSDP and ZeRO-3 keep one
// flat partition per unit.
struct unit {
  std::uint64_t frozen;
  std::uint64_t trainable;
};

std::vector<unit> units(const plan_setup& s) {
  const std::uint64_t layers = s.model.layers;
  const std::uint64_t lora_per_layer = s.lora_rank > 0 ? trainable_params(s) / layers : 0;
  std::vector<unit> out;
  for (std::uint64_t l = 0; l < layers; ++l) {
    if (s.lora_rank > 0) {
      out.push_back({layer_params(s.model), lora_per_layer});
    } else {
      out.push_back({0, layer_params(s.model)});
    }
  }
  const std::uint64_t outer = outer_params(s.model);
  out.push_back(s.lora_rank > 0 ? unit{outer, 0} : unit{0, outer});
  return out;
}

}  // namespace

const char* category_name(category c) {
  switch (c) {
    case category::parameters:
      return "parameters";
    case category::gradients:
      return "gradients";
    case category::optimizer_state:
      return "optimizer state";
    case category::activations:
      return "activations";
    case category::collective_buffers:
      return "collective buffers";
  }
  return "?";
}

std::uint64_t model_state_bytes::gpu_total() const {
  std::uint64_t t = 0;
  for (const std::uint64_t b : gpu) t += b;
  return t;
}

std::vector<held_tensor> model_state_tensors(const plan_setup& s) {
  const std::uint64_t w = weight_bytes(s.dtype);
  const std::uint64_t n = s.zero == 0 ? 1 : (s.zero == 3 ? shard_ranks(s) : s.gpus);
  const bool mixed = s.dtype == precision::bf16_mixed;
  const place param_place = s.params == offload_to::none
                                ? place::gpu
                                : (s.params == offload_to::host ? place::host : place::nvme);
  const place opt_place = s.optimizer == offload_to::none
                              ? place::gpu
                              : (s.optimizer == offload_to::host ? place::host : place::nvme);
  std::vector<held_tensor> out;
  const auto add = [&](category c, place p, std::uint64_t bytes) {
    if (bytes > 0) out.push_back({c, p, bytes});
  };
  for (const unit& u : units(s)) {
    const std::uint64_t all = u.frozen + u.trainable;
    // Working parameters: whole, or a partition under ZeRO-3.
    add(category::parameters, param_place, s.zero == 3 ? div_up(all, n) * w : all * w);
    // Gradients held all step: DDP's, and ZeRO-1/2's bf16 gradients unless
    // they stream to an offloaded optimizer. Plain PyTorch's are made in
    // backward instead (step_schedule).
    if ((s.zero == 0 && !gradients_made_in_backward(s)) ||
        (s.zero > 0 && s.zero < 3 && s.optimizer == offload_to::none)) {
      add(category::gradients, place::gpu, u.trainable * w);
    }
    // Optimizer state per partition: fp32 master (mixed precision only),
    // the two moments, and under ZeRO an fp32 gradient partition.
    const std::uint64_t part = div_up(u.trainable, n);
    if (u.trainable == 0) continue;
    if (mixed) add(category::optimizer_state, opt_place, part * 4);
    add(category::optimizer_state, opt_place, part * 4);
    add(category::optimizer_state, opt_place, part * 4);
    if (s.zero > 0 && mixed) add(category::gradients, opt_place, part * 4);
  }
  return out;
}

model_state_bytes sum_model_states(const plan_setup& s) {
  model_state_bytes b;
  for (const held_tensor& t : model_state_tensors(s)) {
    if (t.where == place::gpu) b.gpu[static_cast<std::size_t>(t.what)] += t.bytes;
    if (t.where == place::host) b.host += t.bytes;
    if (t.where == place::nvme) b.nvme += t.bytes;
  }
  return b;
}

published_figure deepspeed_estimate(const plan_setup& s) {
  published_figure f;
  if (s.lora_rank > 0 || s.zero == 0 || s.dtype != precision::bf16_mixed) return f;
  f.applies = true;
  const auto psi = static_cast<double>(total_params(s.model));
  const auto gpus = static_cast<double>(s.zero == 3 ? shard_ranks(s) : s.gpus);
  const double per_node = static_cast<double>(s.gpus) / static_cast<double>(s.nodes);
  const auto nodes = static_cast<double>(s.nodes);
  const auto largest = static_cast<double>(largest_module_params(s.model));
  const bool off_opt = s.optimizer != offload_to::none;
  const bool off_params = s.params != offload_to::none;
  double gpu = 0;
  double cpu = 0;
  if (s.zero < 3) {
    gpu = off_opt ? 2 * psi : 4 * psi + 16 * psi / gpus;
    cpu = off_opt ? psi * std::max(4 * gpus, 16.0) * 1.5 : psi * 4 * per_node * 1.5;
    f.formula = off_opt ? "2 Psi" : "4 Psi + 16 Psi / N";
  } else {
    f.working = static_cast<std::uint64_t>(4 * largest);
    gpu = 4 * largest + (off_params ? 0 : (off_opt ? 2 : 18) * psi / gpus);
    cpu = off_opt ? psi * (off_params ? 18 : 16) / nodes * 1.5 : largest * 4 * per_node * 1.5;
    f.formula = off_params ? "4 L" : (off_opt ? "4 L + 2 Psi / N" : "4 L + 18 Psi / N");
  }
  f.gpu = static_cast<std::uint64_t>(gpu);
  f.cpu = static_cast<std::uint64_t>(cpu);
  f.formula += " = " + format_bytes(f.gpu);
  return f;
}

published_figure zero_paper_figure(const plan_setup& s) {
  published_figure f;
  if (s.lora_rank > 0 || s.dtype != precision::bf16_mixed || s.optimizer != offload_to::none ||
      s.params != offload_to::none) {
    return f;
  }
  f.applies = true;
  const auto psi = static_cast<double>(total_params(s.model));
  const auto n = static_cast<double>(s.zero == 3 ? shard_ranks(s) : s.gpus);
  const double k = 12;
  double gpu = 0;
  switch (s.zero) {
    case 0:
      gpu = (2 + 2 + k) * psi;
      f.formula = "(2 + 2 + K) Psi";
      break;
    case 1:
      gpu = 4 * psi + k * psi / n;
      f.formula = "4 Psi + K Psi / N";
      break;
    case 2:
      gpu = 2 * psi + (2 + k) * psi / n;
      f.formula = "2 Psi + (2 + K) Psi / N";
      break;
    default:
      gpu = (2 + 2 + k) * psi / n;
      f.formula = "(2 + 2 + K) Psi / N";
      break;
  }
  f.gpu = static_cast<std::uint64_t>(gpu);
  f.formula += " = " + format_bytes(f.gpu);
  return f;
}

}  // namespace strata::plan
