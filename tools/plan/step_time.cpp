#include "plan/step_time.hpp"

#include <algorithm>

namespace strata::plan {

step_time estimate_step_time(const plan_setup& s) {
  const model_shape& m = s.model;
  const hardware_rates& r = s.rates;
  step_time t;
  const auto tokens = static_cast<double>(s.micro_batch * s.seq);
  const auto params = static_cast<double>(total_params(m));
  const double attention = 4.0 * static_cast<double>(m.layers) *
                           static_cast<double>(s.micro_batch) * static_cast<double>(s.seq) *
                           static_cast<double>(s.seq) * static_cast<double>(m.hidden);
  const double forward = 2.0 * params * tokens + attention;
  const double backward = (s.lora_rank > 0 ? 1.0 : 2.0) * forward;
  const double recompute = s.checkpointing ? forward : 0.0;
  const double rate = r.tflops * 1e12 / (s.dtype == precision::fp32 ? 8.0 : 1.0);
  const auto micro = static_cast<double>(s.grad_accum);
  t.compute = micro * (forward + backward + recompute) / rate;
  const double backward_time = micro * (backward + recompute) / rate;

  // Collectives, in seconds of bus time.
  const auto n = static_cast<double>(s.zero == 3 ? shard_ranks(s) : s.gpus);
  const double w = s.dtype == precision::fp32 ? 4.0 : 2.0;
  const auto trainable = static_cast<double>(trainable_params(s));
  const double bus =
      (s.nodes > 1 && !(s.zero == 3 && s.hybrid_shard) ? r.network_gbps : r.nvlink_gbps) * 1e9;
  const double ring = n > 1 ? (n - 1) / n : 0.0;
  const double layer_share = 1.0 / static_cast<double>(m.layers);
  if (s.gpus > 1) {
    if (s.zero == 0) {
      const double reduce = 2 * ring * trainable * w / bus;
      t.collectives = reduce;
      t.exposed_collectives =
          std::max(0.0, reduce - backward_time) + reduce * layer_share;  // the last bucket
    } else if (s.zero < 3) {
      const double scatter = ring * trainable * w / bus;
      const double gather = ring * trainable * w / bus;
      t.collectives = scatter + gather;
      t.exposed_collectives =
          std::max(0.0, scatter - backward_time) + scatter * layer_share + gather;
    } else {
      const double gathers = micro * 2 * ring * params * w / bus;
      const double scatter = micro * ring * trainable * w / bus;
      t.collectives = gathers + scatter;
      t.exposed_collectives = std::max(0.0, t.collectives - t.compute) +
                              t.collectives * layer_share / (2 * micro);  // the first layer
    }
    if (s.hybrid_shard && s.nodes > 1) {  // replicas all-reduce their shards across nodes
      const auto replicas = static_cast<double>(s.nodes);
      const double across =
          2 * (replicas - 1) / replicas * trainable / n * w / (r.network_gbps * 1e9);
      t.collectives += across;
      t.exposed_collectives += across;
    }
  }

  // Offload.
  const double per_gpu_trainable = trainable / std::max(n, 1.0);
  const double per_node = static_cast<double>(s.gpus) / static_cast<double>(s.nodes);
  if (s.optimizer != offload_to::none) {
    const double pcie = 2 * per_gpu_trainable * w / (r.pcie_gbps * 1e9);
    const double adam = per_gpu_trainable * per_node / (r.host_adam_gparams * 1e9);
    double nvme = 0;
    if (s.optimizer == offload_to::nvme) {
      nvme = 2 * 12 * per_gpu_trainable * per_node / (r.nvme_gbps * 1e9);
    }
    t.transfers += pcie + adam + nvme;
    t.exposed_transfers += pcie + adam + nvme;  // the step waits for its optimizer
  }
  if (s.params != offload_to::none) {
    const double shard = params / n * w;
    double fetch = micro * 2 * shard / (r.pcie_gbps * 1e9);
    if (s.params == offload_to::nvme) {
      fetch += micro * 2 * shard * per_node / (r.nvme_gbps * 1e9);
    }
    t.transfers += fetch;
    t.exposed_transfers += std::max(0.0, fetch - t.compute) + fetch * layer_share / 2;
  }
  return t;
}

}  // namespace strata::plan
