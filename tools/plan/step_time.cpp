#include "plan/step_time.hpp"

#include <algorithm>
#include <future>

#include "plan/step_ranks.hpp"

namespace strata::plan {

namespace {

// Micro-batches a step's simulation runs at most. Past the first few and
// before the last, every micro-batch repeats the one before it (the same
// kernels, gathers and, under DDP's no_sync, no reduction), so a step of
// more adds the difference between the steps of this many and one fewer
// for each: exact once they repeat (Qwen2.5-1.5B's ZeRO-3 step with
// offloaded parameters settles at the ninth), and the simulation's cost no
// longer grows with the accumulation (1024 took 145 s on 4096 GPUs).
constexpr std::uint64_t simulated_micro_batches = 12;

// `a` + `times` x (a - b), at least 0.
double extrapolate(double a, double b, double times) {
  return std::max(0.0, a + times * (a - b));
}
std::uint64_t extrapolate(std::uint64_t a, std::uint64_t b, std::uint64_t times) {
  return a >= b ? a + times * (a - b) : a;
}

step_time extrapolate(const step_time& a, const step_time& b, std::uint64_t times) {
  const auto x = static_cast<double>(times);
  step_time t = a;
  t.compute = extrapolate(a.compute, b.compute, x);
  t.exposed_collectives = extrapolate(a.exposed_collectives, b.exposed_collectives, x);
  t.exposed_transfers = extrapolate(a.exposed_transfers, b.exposed_transfers, x);
  t.collectives = extrapolate(a.collectives, b.collectives, x);
  t.transfers = extrapolate(a.transfers, b.transfers, x);
  t.whole = extrapolate(a.whole, b.whole, x);
  parameter_traffic& p = t.params;
  const parameter_traffic& q = b.params;
  p.gathers = extrapolate(p.gathers, q.gathers, times);
  p.gathers_ahead = extrapolate(p.gathers_ahead, q.gathers_ahead, times);
  p.gathers_reused = extrapolate(p.gathers_reused, q.gathers_reused, times);
  p.bytes_from_host = extrapolate(p.bytes_from_host, q.bytes_from_host, times);
  p.bytes_from_nvme = extrapolate(p.bytes_from_nvme, q.bytes_from_nvme, times);
  p.bytes_to_nvme = extrapolate(p.bytes_to_nvme, q.bytes_to_nvme, times);
  p.late_fills = extrapolate(p.late_fills, q.late_fills, times);
  return t;
}

}  // namespace

result<step_time> simulate_step_time(const plan_setup& s, std::uint64_t parameter_room,
                                     step_parts parts) {
  // Every run below makes its own devices and threads, so they run side
  // by side: a plan takes its cores' time, not one core's.
  if (s.grad_accum > simulated_micro_batches) {
    plan_setup most = s;
    most.grad_accum = simulated_micro_batches;
    plan_setup fewer = s;
    fewer.grad_accum = simulated_micro_batches - 1;
    auto b = std::async(std::launch::async,
                        [&] { return simulate_step_time(fewer, parameter_room, parts); });
    auto a = simulate_step_time(most, parameter_room, parts);
    auto b_done = b.get();
    if (!a) return a.error();
    if (!b_done) return b_done.error();
    return extrapolate(*a, *b_done, s.grad_accum - simulated_micro_batches);
  }
  const bool offload = s.optimizer != offload_to::none || s.params != offload_to::none;
  const bool collectives = (s.zero == 3 ? shard_ranks(s) : s.gpus) > 1;
  const bool all = parts == step_parts::all;
  using run_result = result<step_run>;
  const auto start = [&](bool needed, timed_parts timed) {
    return std::async(std::launch::async, [&s, parameter_room, needed, timed]() -> run_result {
      if (!needed) return step_run{};
      return run_step_ranks(s, timed, parameter_room);
    });
  };
  auto without_transfers_run = start(all && offload, {true, true, false});
  auto compute_run = start(all && collectives, {true, false, false});
  auto collective_run = start(all && collectives, {false, true, false});
  auto transfer_run = start(all && offload, {false, false, true});
  run_result full = run_step_ranks(s, {}, parameter_room);
  run_result without_transfers = without_transfers_run.get();
  run_result compute = compute_run.get();
  run_result collective_time = collective_run.get();
  run_result transfer_time = transfer_run.get();
  for (const run_result* r :
       {&full, &without_transfers, &compute, &collective_time, &transfer_time}) {
    if (!*r) return r->error();
  }
  step_time t;
  t.params = full->params;
  t.conf = full->conf;
  if (!all) {
    t.parts_known = false;
    t.whole = full->seconds;
    return t;
  }
  // A part that takes no time leaves the runs that differ by it alike.
  if (!offload) without_transfers = full;
  if (!collectives) compute = without_transfers;
  t.compute = compute->seconds;
  t.exposed_collectives = std::max(0.0, without_transfers->seconds - compute->seconds);
  t.exposed_transfers = std::max(0.0, full->seconds - without_transfers->seconds);
  t.collectives = collective_time->seconds;
  t.transfers = transfer_time->seconds;
  return t;
}

}  // namespace strata::plan
