// GPUs whose achieved rates time a plan's step (`strata plan --gpu`,
// docs/plan.md "Step time"). Achieved, not peak: what a training step's
// kernels reach on that GPU, measured, so a plan's step time is the one a
// user sees.
//
// Thread safety: constant data.
#pragma once

#include <span>
#include <string_view>

namespace strata::plan {

struct gpu_preset {
  std::string_view name;
  double tflops;    ///< matmuls and attention, bf16, 10^12 FLOP/s
  double hbm_gbps;  ///< memory-bound kernels (elementwise, norms, softmax, Adam), GB/s
};

/// H100 80GB HBM3. Matmuls and attention: the shared H100 profiler trace
/// of GPT-2, whose GEMM and sdpa kernels do 7.0 TFLOP in 24.9 ms a step.
/// Memory-bound kernels: fitted so that GPT-2, batch 8 x 1024 under amp,
/// takes the measured 75 ms a step (the rate absorbs the 11% of the step
/// the GPU sits idle).
inline constexpr gpu_preset h100_preset{"h100", 281, 2600};

/// Every preset.
[[nodiscard]] std::span<const gpu_preset> gpu_presets();
/// The preset named `name`, or null.
[[nodiscard]] const gpu_preset* find_gpu_preset(std::string_view name);

}  // namespace strata::plan
