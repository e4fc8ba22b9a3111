#include "plan/planner.hpp"

#include <algorithm>
#include <functional>

namespace strata::plan {

namespace {

struct change {
  const char* what;
  std::function<bool(plan_setup&)> apply;  // false: does not apply to this setup
};

std::vector<change> changes(const plan_setup& base) {
  std::vector<change> all;
  all.push_back({"ZeRO-3 (parameters sharded too)", [](plan_setup& s) {
                   if (s.zero == 3) return false;
                   s.zero = 3;
                   return true;
                 }});
  all.push_back({"optimizer state in host memory", [](plan_setup& s) {
                   if (s.optimizer != offload_to::none) return false;
                   s.optimizer = offload_to::host;
                   s.zero = std::max(s.zero, 2);
                   return true;
                 }});
  all.push_back({"optimizer state on NVMe", [](plan_setup& s) {
                   if (s.optimizer == offload_to::nvme) return false;
                   s.optimizer = offload_to::nvme;
                   s.zero = std::max(s.zero, 2);
                   return true;
                 }});
  all.push_back({"parameters in host memory (ZeRO-3)", [](plan_setup& s) {
                   if (s.params != offload_to::none) return false;
                   s.params = offload_to::host;
                   s.zero = 3;
                   return true;
                 }});
  all.push_back({"activation checkpointing", [](plan_setup& s) {
                   if (s.checkpointing) return false;
                   s.checkpointing = true;
                   return true;
                 }});
  // Smaller micro-batches that keep the global batch: the largest few
  // proper divisors, with the accumulation steps that make up the rest.
  std::vector<std::uint64_t> smaller;
  for (std::uint64_t b = base.micro_batch / 2; b >= 1 && smaller.size() < 4; --b) {
    if (base.micro_batch % b == 0) smaller.push_back(b);
  }
  for (const std::uint64_t b : smaller) {
    all.push_back({nullptr, [b, base](plan_setup& s) {
                     if (s.micro_batch != base.micro_batch) return false;  // one batch change
                     s.grad_accum = s.grad_accum * (base.micro_batch / b);
                     s.micro_batch = b;
                     return true;
                   }});
  }
  return all;
}

std::string describe(const change& c, const plan_setup& after) {
  if (c.what != nullptr) return c.what;
  return "micro-batch " + std::to_string(after.micro_batch) + " with " +
         std::to_string(after.grad_accum) + " accumulation steps";
}

}  // namespace

std::uint64_t judged_reserve(const plan_result& p) {
  switch (p.setup.allocator) {
    case allocator_kind::pytorch:
      return p.pytorch.native;
    case allocator_kind::expandable:
      return p.pytorch.expandable;
    case allocator_kind::all:
    case allocator_kind::strata:
      break;
  }
  return p.memory.peak_reserved;
}

bool plan_fits(const plan_result& p) {
  // Strata's run says whether it failed; PyTorch's models only give a peak.
  const bool strata =
      p.setup.allocator == allocator_kind::all || p.setup.allocator == allocator_kind::strata;
  return strata ? p.memory.fits : judged_reserve(p) <= p.memory.usable;
}

result<plan_result> make_plan(const plan_setup& s, timing t) {
  if (auto c = check_setup(s); !c) return c;
  plan_result p;
  p.setup = s;
  const step_schedule schedule = make_step_schedule(s);
  auto memory = run_step(s, schedule);
  if (!memory) return memory.error();
  p.memory = *memory;
  p.pytorch = pytorch_peak_reserved(schedule);
  // What the rest of the step leaves ZeRO-3's parameters at its peak: the
  // room their shards are cached in and their gathers run ahead into.
  const std::uint64_t rest =
      p.memory.peak_reserved -
      std::min(p.memory.peak_reserved,
               p.memory.by_category[static_cast<std::size_t>(category::parameters)] +
                   p.memory.by_category[static_cast<std::size_t>(category::collective_buffers)]);
  if (t == timing::always || (t == timing::whole_if_fits && plan_fits(p))) {
    auto time = simulate_step_time(s, p.memory.usable - std::min(p.memory.usable, rest),
                                   t == timing::always ? step_parts::all : step_parts::whole);
    if (!time) return time.error();
    p.time = *time;
  }
  p.states = sum_model_states(s);
  p.deepspeed = deepspeed_estimate(s);
  p.paper = zero_paper_figure(s);
  const std::uint64_t per_node = s.gpus / s.nodes;
  // Pinned staging for what moves: two of the largest module's fp32 state.
  const std::uint64_t staging = (s.optimizer != offload_to::none || s.params != offload_to::none)
                                    ? largest_module_params(s.model) * 32
                                    : 0;
  p.host_bytes = p.states.host * per_node + staging * per_node;
  p.nvme_bytes = p.states.nvme * per_node;
  return p;
}

result<std::vector<fix>> find_fixes(const plan_setup& s) {
  const std::vector<change> all = changes(s);
  std::vector<fix> found;
  // One change, else two, else three: the fewest changes first.
  for (std::size_t k = 1; k <= 3 && found.empty(); ++k) {
    std::vector<std::size_t> pick(k, 0);
    const std::function<status(std::size_t, std::size_t)> choose = [&](std::size_t depth,
                                                                       std::size_t from) -> status {
      if (depth == k) {
        plan_setup t = s;
        std::string text;
        for (const std::size_t i : pick) {
          if (!all[i].apply(t)) return {};
          text += (text.empty() ? "" : " + ") + describe(all[i], t);
        }
        if (!check_setup(t).ok()) return {};
        auto p = make_plan(t, timing::whole_if_fits);
        if (!p) return p.error();
        if (plan_fits(*p)) found.push_back({text, std::move(*p)});
        return {};
      }
      for (std::size_t i = from; i < all.size(); ++i) {
        pick[depth] = i;
        if (auto st = choose(depth + 1, i + 1); !st) return st;
      }
      return {};
    };
    if (auto st = choose(0, 0); !st) return st;
  }
  std::sort(found.begin(), found.end(),
            [](const fix& a, const fix& b) { return a.plan.time.total() < b.plan.time.total(); });
  return found;
}

result<search_result> largest_batch(const plan_setup& s) {
  search_result best;
  plan_setup t = s;
  std::uint64_t lo = 0;  // fits (0: none yet)
  std::uint64_t hi = 0;  // does not fit (0: none yet)
  std::uint64_t b = 1;
  while (hi == 0 || hi - lo > 1) {
    t.micro_batch = b;
    auto p = make_plan(t, timing::never);
    if (!p) return p.error();
    if (plan_fits(*p)) {
      lo = b;
      best.micro_batch = b;
    } else {
      hi = b;
    }
    if (hi == 0) {
      if (b > (1ULL << 20)) break;  // fits at any batch a person would ask for
      b *= 2;
    } else if (hi - lo > 1) {
      b = lo + (hi - lo) / 2;
    }
  }
  if (best.micro_batch == 0) return best;
  t.micro_batch = best.micro_batch;
  auto p = make_plan(t);
  if (!p) return p.error();
  best.plan = std::move(*p);
  return best;
}

}  // namespace strata::plan
