#include "plan/step_time.hpp"

#include <algorithm>

#include "plan/step_ranks.hpp"

namespace strata::plan {

result<step_time> simulate_step_time(const plan_setup& s, std::uint64_t parameter_room) {
  const bool offload = s.optimizer != offload_to::none || s.params != offload_to::none;
  const bool collectives = (s.zero == 3 ? shard_ranks(s) : s.gpus) > 1;
  const auto run = [&](timed_parts parts) { return run_step_ranks(s, parts, parameter_room); };
  const result<step_run> none{step_run{}};
  auto full = run({});
  if (!full) return full.error();
  auto without_transfers = offload ? run({true, true, false}) : full;
  if (!without_transfers) return without_transfers.error();
  auto compute = collectives ? run({true, false, false}) : without_transfers;
  if (!compute) return compute.error();
  auto collective_time = collectives ? run({false, true, false}) : none;
  if (!collective_time) return collective_time.error();
  auto transfer_time = offload ? run({false, false, true}) : none;
  if (!transfer_time) return transfer_time.error();
  step_time t;
  t.compute = compute->seconds;
  t.exposed_collectives = std::max(0.0, without_transfers->seconds - compute->seconds);
  t.exposed_transfers = std::max(0.0, full->seconds - without_transfers->seconds);
  t.collectives = collective_time->seconds;
  t.transfers = transfer_time->seconds;
  t.params = full->params;
  t.conf = full->conf;
  return t;
}

}  // namespace strata::plan
