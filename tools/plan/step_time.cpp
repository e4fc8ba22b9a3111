#include "plan/step_time.hpp"

#include <algorithm>

#include "plan/step_ranks.hpp"

namespace strata::plan {

result<step_time> simulate_step_time(const plan_setup& s) {
  const bool offload = s.optimizer != offload_to::none || s.params != offload_to::none;
  const bool collectives = (s.zero == 3 ? shard_ranks(s) : s.gpus) > 1;
  auto full = run_step_ranks(s, {});
  if (!full) return full.error();
  auto without_transfers = offload ? run_step_ranks(s, {true, true, false}) : full;
  if (!without_transfers) return without_transfers.error();
  auto compute = collectives ? run_step_ranks(s, {true, false, false}) : without_transfers;
  if (!compute) return compute.error();
  auto collective_time =
      collectives ? run_step_ranks(s, {false, true, false}) : result<double>{0.0};
  if (!collective_time) return collective_time.error();
  auto transfer_time = offload ? run_step_ranks(s, {false, false, true}) : result<double>{0.0};
  if (!transfer_time) return transfer_time.error();
  step_time t;
  t.compute = *compute;
  t.exposed_collectives = std::max(0.0, *without_transfers - *compute);
  t.exposed_transfers = std::max(0.0, *full - *without_transfers);
  t.collectives = *collective_time;
  t.transfers = *transfer_time;
  return t;
}

}  // namespace strata::plan
