// What a plan is asked about: the model, the parallel setup, the offload
// choices and the hardware rates the step-time model uses.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "plan/gpu_presets.hpp"
#include "plan/model_shape.hpp"

namespace strata::plan {

enum class precision : std::uint8_t {
  bf16_mixed,  ///< bf16 parameters and gradients, fp32 master copy and Adam state
  fp32,        ///< everything fp32
  amp          ///< fp32 parameters, gradients and Adam state, bf16 compute (torch.autocast)
};

/// Bytes of a parameter or gradient element: 4 with fp32 weights (fp32, amp).
inline std::uint64_t weight_bytes(precision p) {
  return p == precision::bf16_mixed ? 2 : 4;
}
enum class offload_to : std::uint8_t { none, host, nvme };

/// The rates of the step-time model (docs/plan.md): achieved, not peak.
struct hardware_rates {
  /// achieved TFLOP/s of matmuls and attention per GPU (bf16; fp32 at 1/8 of it)
  double tflops = h100_preset.tflops;
  double hbm_gbps = h100_preset.hbm_gbps;  ///< achieved GB/s of memory-bound kernels per GPU
  double nvlink_gbps = 150;                ///< collective bus bandwidth within a node, GB/s per GPU
  double network_gbps = 25;                ///< collective bus bandwidth across nodes, GB/s per GPU
  double pcie_gbps = 25;                   ///< host <-> device, GB/s per GPU
  double nvme_gbps = 3;                    ///< NVMe read or write, GB/s per node
  /// CPU Adam, 10^9 parameters per second per node (ZeRO-Offload's
  /// CPU-Adam: about 0.25 s for 10^9 parameters on one server)
  double host_adam_gparams = 4.0;
  /// Charge the GPU driver's calls (events, memory mapping) what an H100
  /// measured (docs/device.md); false: they are free (tests that check the
  /// step's arithmetic).
  bool driver_costs = true;
};

/// Whose reserve says whether a job fits (`--allocator`): Strata's, or
/// the model of PyTorch's caching allocator, default or with expandable
/// segments (pytorch_allocator.hpp). `all`: Strata's, the others printed
/// beside it.
enum class allocator_kind : std::uint8_t { all, strata, pytorch, expandable };

struct plan_setup {
  model_shape model;
  std::uint64_t gpus = 1;
  std::uint64_t nodes = 1;
  std::uint64_t gpu_memory = 80ULL << 30;
  /// Held by the CUDA context, kernels' workspaces and the framework
  /// before the first tensor: not available to the allocator.
  std::uint64_t context_memory = 1ULL << 30;
  int zero = 0;               ///< 0 (DDP), 1, 2 or 3 (FSDP full shard)
  bool hybrid_shard = false;  ///< FSDP hybrid: ZeRO-3 within a node, replicas across nodes
  std::uint64_t micro_batch = 1;
  std::uint64_t seq = 2048;
  std::uint64_t grad_accum = 1;
  precision dtype = precision::bf16_mixed;
  std::uint64_t lora_rank = 0;  ///< 0: full fine-tuning
  bool lora_mlp = false;        ///< LoRA on the FFN matrices too (default: attention only)
  bool checkpointing = false;
  bool flash_attention = true;  ///< false: the s x s scores are kept (eager attention)
  offload_to optimizer = offload_to::none;
  offload_to params = offload_to::none;
  hardware_rates rates{};
  allocator_kind allocator = allocator_kind::all;
};

/// The bounds of a setup: up to 4096 GPUs of up to 1 TiB; batches,
/// sequences and accumulation far past any run, small enough that no
/// product of them overflows; rates (TFLOP/s, GB/s) positive and finite.
inline constexpr std::uint64_t max_gpus = 4096;
inline constexpr std::uint64_t max_gpu_memory = std::uint64_t{1} << 40;
inline constexpr std::uint64_t max_micro_batch = 65536;
inline constexpr std::uint64_t max_seq = std::uint64_t{1} << 20;
inline constexpr std::uint64_t max_grad_accum = 65536;
inline constexpr double min_rate = 1e-3;
inline constexpr double max_rate = 1e6;

/// A rate as the user would write it (%g: 0.001, 2600, 1e+06, nan).
[[nodiscard]] std::string format_rate(double v);

/// invalid_argument naming what is wrong, in the command's flags: a count
/// out of its range (GPUs, batch, sequence, accumulation), nodes not
/// dividing the GPUs, a bad ZeRO stage, parameter offload without ZeRO-3,
/// optimizer offload without ZeRO, memory above 1 TiB or smaller than the
/// context or than one layer's parameters, a rate that is not positive and
/// finite, a bad shape.
status check_setup(const plan_setup& s);

/// GPUs a parameter is sharded over: all of them, or a node's with hybrid
/// sharding.
[[nodiscard]] std::uint64_t shard_ranks(const plan_setup& s);
/// Parameters that train: all, or the LoRA adapters'.
[[nodiscard]] std::uint64_t trainable_params(const plan_setup& s);
/// True for plain PyTorch training (amp or fp32 on one GPU, no ZeRO): the
/// optimizer's zero_grad(set_to_none) frees the gradients before forward
/// and backward makes them again, layer by layer, so they are not held
/// through forward.
[[nodiscard]] bool gradients_made_in_backward(const plan_setup& s);

}  // namespace strata::plan
