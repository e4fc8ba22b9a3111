// The step time and where it goes (docs/plan.md, "Step time"): the step
// runs on every GPU of the job as modeled time (step_ranks.hpp), several
// times with parts of it taking no time, and the differences say what
// compute hides and what it does not.
//
//   compute              the step with only kernels taking time
//   exposed collectives  with collectives too, less compute
//   exposed transfers    the whole step, less the step without transfers
//   collectives          the step with only collectives taking time
//   transfers            the step with only transfers taking time
//
// Thread safety: each call runs its own devices; calls may run
// concurrently.
#pragma once

#include "plan/plan_setup.hpp"
#include "plan/step_ranks.hpp"
#include "strata/error.hpp"

namespace strata::plan {

struct step_time {
  double compute = 0;              ///< seconds
  double exposed_collectives = 0;  ///< collective time compute does not hide
  double exposed_transfers = 0;    ///< offload transfers and the host optimizer not hidden
  double collectives = 0;          ///< all collective time, hidden or not
  double transfers = 0;            ///< all offload time, hidden or not
  /// ZeRO-3: what the parameters' gathers and fills did in the full run.
  parameter_traffic params;
  std::string conf;  ///< STRATA_CONF the step assumes beyond the defaults (step_run)
  /// False when only the whole step was run (step_parts::whole): `whole`
  /// holds it and the parts above are 0.
  bool parts_known = true;
  double whole = 0;  ///< seconds, when !parts_known
  /// The whole step: the latest GPU's modeled clock (adding time to a part
  /// never shortens the step, so the parts sum to it).
  [[nodiscard]] double total() const {
    return parts_known ? compute + exposed_collectives + exposed_transfers : whole;
  }
};

/// What simulate_step_time runs: the step with each part alone and
/// without the transfers (up to five runs), or the whole step once.
enum class step_parts : std::uint8_t { all, whole };

/// `parameter_room`: the device bytes the rest of the step leaves ZeRO-3's
/// parameters (run_step_ranks). A step of more than 12 micro-batches is run
/// with 12 and 11, each further one adding the difference (they repeat), so
/// the cost is bounded. Errors: run_step_ranks'.
result<step_time> simulate_step_time(const plan_setup& s,
                                     std::uint64_t parameter_room = ~std::uint64_t{0},
                                     step_parts parts = step_parts::all);

}  // namespace strata::plan
