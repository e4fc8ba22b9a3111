// One training step of one GPU as a sequence of allocations and frees
// (docs/plan.md, "The step"): the model states first (held all step), then
// for each micro-batch forward layer by layer (under ZeRO-3 each layer's
// parameters are all-gathered into a buffer one layer ahead and freed after
// it), the logits and the loss, and backward in reverse (recomputing a
// checkpointed layer first; the layer's gradients, transient under ZeRO-3,
// reduce-scattered into the fp32 partition), then the optimizer step.
// Every rank of a data-parallel job runs the same sequence, so one GPU's
// schedule is every GPU's.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/model_states.hpp"

namespace strata::plan {

struct step_event {
  enum class kind : std::uint8_t { alloc, free, phase };
  kind what = kind::alloc;
  category of = category::activations;
  std::uint32_t id = 0;     ///< alloc/free: the tensor; phase: the index into phases
  std::uint64_t bytes = 0;  ///< alloc
};

struct step_schedule {
  std::vector<step_event> events;
  std::vector<std::string> phases;  ///< "forward, layer 12", ...
  std::uint32_t tensors = 0;        ///< ids handed out
};

step_schedule make_step_schedule(const plan_setup& s);

}  // namespace strata::plan
