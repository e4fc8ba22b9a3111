// The trace's last step, found and repeated (step_cycle.hpp), and the
// steady state the timeline measures with it.
#include <gtest/gtest.h>

#include <map>
#include <unordered_map>

#include "replay/alloc_trace.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "replay/step_cycle.hpp"

namespace strata::replay {
namespace {

constexpr std::uint64_t mib = 1 << 20;

// A toy training run: weights (a seed), then `steps` steps, each with
// `activations` activations allocated and freed in reverse, a gradient
// kept past the step (freed in the next one) and `temporaries` small
// optimizer temporaries at the end, one at a time. The first step is
// unlike the rest: it also makes the optimizer's state.
struct toy_run {
  int steps = 4;
  int activations = 6;
  int temporaries = 12;
};

alloc_trace toy_trace(const toy_run& run) {
  alloc_trace t;
  t.source = "toy";
  t.format = "strata_trace";
  t.timed = true;
  t.seeds.push_back({op_kind::alloc, 0x10, 64 * mib, 0, trace_op::no_frames, 0});
  std::int64_t ns = 1'000'000;
  std::uint64_t next = 0x1000;
  std::uint64_t gradient = 0;
  const auto push = [&](op_kind kind, std::uint64_t addr, std::uint64_t size) {
    t.ops.push_back({kind, addr, size, 0, trace_op::no_frames, ns});
    ns += 100'000;
  };
  for (int s = 0; s < run.steps; ++s) {
    std::vector<std::uint64_t> acts;
    for (int a = 0; a < run.activations; ++a) {
      acts.push_back(next);
      push(op_kind::alloc, next++, (8 + static_cast<std::uint64_t>(a)) * mib);
    }
    // The step's addresses move, as the recording allocator's do.
    for (int a = run.activations - 1; a >= 0; --a) {
      push(op_kind::free, acts[static_cast<std::size_t>(a)],
           (8 + static_cast<std::uint64_t>(a)) * mib);
    }
    push(op_kind::alloc, next, 16 * mib);
    if (gradient != 0) push(op_kind::free, gradient, 16 * mib);
    gradient = next++;
    if (s == 0) push(op_kind::alloc, next++, 32 * mib);  // the optimizer's state
    for (int k = 0; k < run.temporaries; ++k) {
      push(op_kind::alloc, next, mib);
      push(op_kind::free, next++, mib);
    }
  }
  return t;
}

std::size_t step_length(const toy_run& run) {
  return 2 * static_cast<std::size_t>(run.activations) + 2 +
         2 * static_cast<std::size_t>(run.temporaries);
}

TEST(StepCycle, FindsTheLastWholeStepNotALoopInsideIt) {
  const toy_run run;
  const alloc_trace t = toy_trace(run);
  const auto step = find_last_step(t);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->ops, step_length(run)) << "not the temporaries' loop of 2 ops";
  EXPECT_EQ(step->first_op, t.ops.size() - step_length(run));
  EXPECT_EQ(step->span_ns, static_cast<std::int64_t>(step_length(run)) * 100'000);
}

TEST(StepCycle, NoStepWhereTheEndDoesNotRepeat) {
  toy_run run;
  run.steps = 1;
  EXPECT_FALSE(find_last_step(toy_trace(run)).has_value()) << "one step";
  run.steps = 4;
  alloc_trace t = toy_trace(run);
  t.ops.push_back({op_kind::alloc, 0xfffff, 3 * mib, 0, trace_op::no_frames, 1'000'000'000});
  EXPECT_FALSE(find_last_step(t).has_value()) << "a trace that ends in something else";
  t = toy_trace(run);
  t.timed = false;
  EXPECT_FALSE(find_last_step(t).has_value()) << "untimed";
  t = toy_trace(run);
  t.ops.back().size = 2 * mib;  // the last step's last free differs from the one before
  t.ops[t.ops.size() - 2].size = 2 * mib;
  EXPECT_FALSE(find_last_step(t).has_value()) << "ops that differ";
}

// Finding a step costs comparisons of ops, within a budget: a trace
// built to match at many lengths gives up instead of taking long, and a
// step too long to repeat is said to be so.
TEST(StepCycle, TheSearchAndTheRepeatsAreBounded) {
  const toy_run run;
  const alloc_trace t = toy_trace(run);
  EXPECT_TRUE(find_last_step(t, t.ops.size() + step_length(run)).has_value());
  EXPECT_FALSE(find_last_step(t, step_length(run)).has_value()) << "the budget is spent first";
  // Every pair frees what it allocates, so the same (no) sizes are live
  // after every pair, but no two pairs are alike: no step, and each length
  // fails at its first op.
  alloc_trace pairs;
  pairs.timed = true;
  for (std::uint64_t k = 0; k < 4096; ++k) {
    const auto ns = static_cast<std::int64_t>(k);
    pairs.ops.push_back({op_kind::alloc, 0x1000, (k + 1) * 512, 0, trace_op::no_frames, ns});
    pairs.ops.push_back({op_kind::free, 0x1000, (k + 1) * 512, 0, trace_op::no_frames, ns});
  }
  EXPECT_FALSE(find_last_step(pairs).has_value());

  const step_cycle small{100, 1000, 1};
  EXPECT_EQ(repeats_within_bound(small, 8), 8U);
  const step_cycle large{100, max_repeated_ops / 3, 1};
  EXPECT_EQ(repeats_within_bound(large, 8), 3U);
  const step_cycle too_long{100, max_repeated_ops + 1, 1};
  EXPECT_EQ(repeats_within_bound(too_long, 8), 0U);
  timeline_result::steady_state s;
  s.tried = true;
  s.step_ops = too_long.ops;
  EXPECT_NE(steady_text(s).find("too long to repeat"), std::string::npos) << steady_text(s);
}

// The repeats are a valid program: every free is of a live block, of its
// size; addresses stay unique; times move on; after each repeat the same
// sizes are live as at the trace's end.
TEST(StepCycle, RepeatsAreAValidTrainingLoop) {
  const toy_run run;
  const alloc_trace t = toy_trace(run);
  const auto step = find_last_step(t);
  ASSERT_TRUE(step.has_value());
  const std::size_t repeats = 5;
  const alloc_trace longer = with_step_repeated(t, *step, repeats);
  ASSERT_EQ(longer.ops.size(), t.ops.size() + repeats * step->ops);
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  for (const trace_op& s : longer.seeds) live[s.addr] = s.size;
  std::map<std::uint64_t, int> at_trace_end;
  for (std::size_t i = 0; i < longer.ops.size(); ++i) {
    const trace_op& op = longer.ops[i];
    if (i > 0) {
      EXPECT_GE(op.time_ns, longer.ops[i - 1].time_ns) << "op " << i;
    }
    if (op.kind == op_kind::alloc) {
      EXPECT_TRUE(live.emplace(op.addr, op.size).second) << "op " << i << " reuses a live address";
    } else {
      auto it = live.find(op.addr);
      ASSERT_NE(it, live.end()) << "op " << i << " frees what is not live";
      EXPECT_EQ(it->second, op.size) << "op " << i;
      live.erase(it);
    }
    const std::size_t done = i + 1;
    if (done >= t.ops.size() && (done - t.ops.size()) % step->ops == 0) {
      std::map<std::uint64_t, int> sizes;
      for (const auto& [addr, size] : live) ++sizes[size];
      if (done == t.ops.size()) {
        at_trace_end = sizes;
      } else {
        EXPECT_EQ(sizes, at_trace_end) << "after repeat " << (done - t.ops.size()) / step->ops;
      }
    }
  }
}

TEST(StepCycle, ATimelineReportsTheSteadyState) {
  const alloc_trace t = toy_trace(toy_run{});
  replay_options o;
  o.timeline = true;
  o.steady_repeats = 6;
  auto r = replay(t, o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const auto& s = r->timeline.steady;
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.repeats, 6U);
  EXPECT_EQ(s.measured, 3U);
  EXPECT_NEAR(s.measured_ms, 3.0 * s.step_ms, 1e-6);
  EXPECT_EQ(s.driver_calls, 0U) << "the cache serves a repeated step";
  // What is left is the events recorded on frees (1.7 us each in training).
  EXPECT_LT(s.added_fraction(), 0.01) << steady_text(s);
  EXPECT_GT(s.peak_live, 0U);
  EXPECT_GE(s.peak_reserved, s.peak_live);
  EXPECT_GT(s.cpu_ns_per_call, 0.0) << "the repeats' calls were timed";
  // Single-threaded, the replay's calls bind its thread cache: some take
  // the fast path, and those that take the lock are counted and timed.
  EXPECT_GT(s.locked_calls, 0U);
  EXPECT_LE(s.locked_calls, s.measured * s.step_ops);
  EXPECT_GT(s.locked_call_ns, 0U);
  EXPECT_GT(s.locked_fraction(), 0.0);
  EXPECT_LE(s.locked_fraction(), 1.0);
  EXPECT_NEAR(s.ns_per_locked_call(),
              static_cast<double>(s.locked_call_ns) / static_cast<double>(s.locked_calls), 1e-9);
  EXPECT_NE(steady_text(s).find("x live"), std::string::npos) << steady_text(s);
  EXPECT_NE(steady_text(s).find(" ns a call"), std::string::npos) << steady_text(s);
  EXPECT_NE(steady_text(s).find("% locked, "), std::string::npos) << steady_text(s);
  const std::string text = report_text(t, *r);
  EXPECT_NE(text.find("timeline: steady state"), std::string::npos) << text;
  EXPECT_NE(text.find(steady_text(s)), std::string::npos) << text;
  const std::string json = report_json(t, *r);
  for (const char* key :
       {R"("steady":{"step_calls":)", R"("measured_repeats":3)", R"("cpu_ns_per_call":)",
        R"("locked_fraction":)", R"("ns_per_locked_call":)", R"("peak_reserved_bytes":)",
        R"("peak_live_bytes":)"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing from " << json;
  }

  o.steady_repeats = 0;
  r = replay(t, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->timeline.steady.tried);
  EXPECT_NE(report_json(t, *r).find(R"("steady":null)"), std::string::npos);
  o.steady_repeats = max_steady_repeats + 1;
  r = replay(t, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("--steady-steps"), std::string::npos);
}

// The H100 recordings hold a few steps each (GPT-2 six, Qwen2.5 four, the
// profiler trace two); a job runs thousands. Once the layout has settled,
// a step makes no driver call and adds under 1%: what is left is an event
// per free (bench/RESULTS.md, "The steady state"); the reserve stays
// within 1.01 x live. The H200's Qwen2.5 recording settled to a cycle
// before: every step re-repaired the fp32 logits' range for the same two
// pages, the idle pages stitched into its holes being live elsewhere
// again a step later (5 driver calls a step); a range repaired again now
// takes pages mapped nowhere else.
TEST(StepCycle, TheH100AndH200RecordingsSettleToNoDriverCall) {
  const std::string traces = std::string(STRATA_SOURCE_DIR) + "/bench/traces/";
  struct recording {
    const char* name;
    std::size_t step_calls;
  };
  for (const recording& c :
       {recording{"h100/gpt2_b8_s1024_amp_sdpa_pytorch2.11.pickle", 2864},
        recording{"h100/qwen2.5-0.5b_b4_s2048_amp_sdpa_pytorch2.11.pickle", 8194},
        recording{"h100/gpt2_b8_s1024_two_steps_profiler_trace.json.xz", 2864},
        recording{"h200/qwen2.5-0.5b_b4_s2048_amp_sdpa_pytorch2.11.pickle", 8194}}) {
    auto t = read_trace(traces + c.name, 0);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    replay_options o;
    o.timeline = true;
    auto r = replay(*t, o);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    const auto& s = r->timeline.steady;
    ASSERT_TRUE(s.found) << c.name;
    EXPECT_EQ(s.step_ops, c.step_calls) << c.name;
    EXPECT_EQ(s.driver_calls, 0U) << c.name << ": " << steady_text(s);
    EXPECT_LT(s.added_fraction(), 0.01) << c.name << ": " << steady_text(s);
    EXPECT_LE(static_cast<double>(s.peak_reserved), 1.01 * static_cast<double>(s.peak_live))
        << c.name << ": " << steady_text(s);
  }
}

}  // namespace
}  // namespace strata::replay
