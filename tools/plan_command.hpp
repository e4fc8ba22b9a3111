// `strata plan`: will a training job fit, where should each byte live, and
// how fast will the step be (docs/plan.md).
#pragma once

#include <cstdint>
#include <string>

#include "plan/plan_setup.hpp"

namespace strata {

struct plan_command_options {
  std::string model;  ///< a preset, or empty with the shape below
  plan::model_shape shape{};
  std::string gpu_memory = "80GiB";
  std::string context_memory = "1GiB";
  std::string dtype = "bf16";
  std::string offload_optimizer = "none";
  std::string offload_params = "none";
  /// Whose reserve decides "fits": all (Strata's, the others beside it),
  /// strata, pytorch or expandable.
  std::string allocator = "all";
  plan::plan_setup setup{};  ///< the numeric options land here
  bool eager_attention = false;
  bool gated_ffn = false;  ///< custom shape: SwiGLU

  bool search = false;
  std::string json_out;  ///< a file, or "-" for stdout (then no text report)
  std::string html_out;  ///< a file
  /// Measure the NVMe rate here (unless nvme_gbps_given), docs/plan.md.
  std::string nvme_dir;
  bool nvme_gbps_given = false;
  /// The GPU preset (plan/gpu_presets.hpp) whose rates apply unless given.
  std::string gpu = "h100";
  bool tflops_given = false;
  bool hbm_gbps_given = false;
};

/// Runs the plan and prints the report. Returns 0 when the job fits, 2
/// when it does not, 1 for bad input (a message on stderr).
int run_plan(const plan_command_options& o);

}  // namespace strata
