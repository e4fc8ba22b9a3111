// A plan: the step schedule run through the allocator, the step-time
// model, the model-state figures, and, when the job does not fit, the
// cheapest changes that make it fit (docs/plan.md).
//
// Thread safety: pure functions (each run makes its own allocator).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/model_states.hpp"
#include "plan/step_run.hpp"
#include "plan/step_time.hpp"

namespace strata::plan {

struct plan_result {
  plan_setup setup;
  step_memory memory;
  step_time time;
  model_state_bytes states;      ///< Strata's model-state tensors, by place
  published_figure deepspeed;    ///< DeepSpeed's estimator for the same setup
  published_figure paper;        ///< the ZeRO paper's figure
  std::uint64_t host_bytes = 0;  ///< pinned host memory needed per node
  std::uint64_t nvme_bytes = 0;  ///< NVMe space needed per node
  pytorch_reserve pytorch;       ///< PyTorch's allocators' peak reserved, same schedule
};

/// Whether the job fits by the setup's allocator (plan_setup::allocator):
/// Strata's run, or PyTorch's modeled peak reserve within the usable memory.
[[nodiscard]] bool plan_fits(const plan_result& p);
/// That allocator's peak reserved bytes (Strata's when it is `all`).
[[nodiscard]] std::uint64_t judged_reserve(const plan_result& p);

/// What a plan times (each timed run of a step is a simulation of every
/// part of it, so a search times as little as it can).
enum class timing : std::uint8_t {
  always,         ///< the step and its parts, fit or not (what a user asked for)
  whole_if_fits,  ///< only a setup that fits, and only its whole step (a fix)
  never,          ///< memory only (a batch search, which then times its pick)
};
/// One setup. Errors: check_setup's; the device's. With
/// timing::whole_if_fits a setup that does not fit leaves `time` empty (with
/// parameters offloaded, a step with no room to cache their shards takes
/// 15-20 s to model), and one that fits has only its total
/// (step_time::parts_known is false); timing::never leaves `time` empty.
result<plan_result> make_plan(const plan_setup& s, timing t = timing::always);

/// A change to the setup that makes it fit, with its plan.
struct fix {
  std::string change;  ///< "activation checkpointing", "optimizer state to host memory", ...
  plan_result plan;
};
/// The changes (one, else two, else three together) that make `s` fit,
/// fastest step first (each timed as timing::whole_if_fits); empty when
/// none does. Errors: as make_plan.
result<std::vector<fix>> find_fixes(const plan_setup& s);

/// The largest micro-batch that fits (0: not even 1), with its plan, timed
/// as timing::always (the others are not timed).
struct search_result {
  std::uint64_t micro_batch = 0;
  plan_result plan;
};
result<search_result> largest_batch(const plan_setup& s);

/// The report for people, as JSON, and as a self-contained HTML page.
std::string plan_text(const plan_result& p, const std::vector<fix>& fixes);
std::string plan_json(const plan_result& p, const std::vector<fix>& fixes);
std::string plan_html(const plan_result& p, const std::vector<fix>& fixes);

}  // namespace strata::plan
