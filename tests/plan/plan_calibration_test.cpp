// strata plan against the H100 calibration runs (../shared/calibration):
// peaks, step times, and PyTorch's allocators replayed over the snapshots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "plan/layer_activations.hpp"
#include "plan/planner.hpp"
#include "plan/step_run.hpp"
#include "plan/step_schedule.hpp"
#include "plan/step_time.hpp"
#include "plan_setups.hpp"
#include "pytorch_model/pytorch_allocator.hpp"
#include "replay/alloc_trace.hpp"
#include "replay/replayer.hpp"

namespace strata::plan {
namespace {

// One of the H100 calibration runs (../shared/calibration): amp, sdpa.
plan_setup calibration_run(const char* model, std::uint64_t batch, std::uint64_t seq,
                           bool checkpointing) {
  plan_setup s = preset(model);
  s.dtype = precision::amp;
  s.micro_batch = batch;
  s.seq = seq;
  s.checkpointing = checkpointing;
  return s;
}

// The calibration runs (../shared/calibration/README.md, H100, PyTorch 2.11,
// transformers 5.17, autocast bf16 over fp32 weights, AdamW, sdpa):
// max_memory_allocated 13.45 GiB for GPT-2 at 8 x 1024 tokens, 7.22 GiB with
// checkpointing, 35.16 GiB for Qwen2.5-0.5B at 4 x 2048, and 30.0 GiB for
// Qwen2.5-1.5B at 2 x 2048 with checkpointing (the plain PyTorch run of the
// offload anchor). The plan's peak is within 10% of each and never more
// than 5% below.
TEST(PlanCalibration, AmpPeaksMatchTheH100Runs) {
  struct run {
    const char* model;
    std::uint64_t batch;
    std::uint64_t seq;
    bool checkpointing;
    double measured_gib;
  };
  for (const run& r :
       {run{"gpt2", 8, 1024, false, 13.45}, run{"gpt2", 8, 1024, true, 7.22},
        run{"qwen2.5-0.5b", 4, 2048, false, 35.16}, run{"qwen2.5-1.5b", 2, 2048, true, 30.0}}) {
    const plan_setup s = calibration_run(r.model, r.batch, r.seq, r.checkpointing);
    auto m = run_step(s, make_step_schedule(s));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    ASSERT_TRUE(m->fits) << r.model;
    const double gib = static_cast<double>(m->peak_tensors) / (1ULL << 30);
    EXPECT_GE(gib, 0.95 * r.measured_gib) << r.model << (r.checkpointing ? " checkpointed" : "");
    EXPECT_LE(gib, 1.10 * r.measured_gib) << r.model << (r.checkpointing ? " checkpointed" : "");
    // What the plan reaches now (0.3%): a change that loses it says so.
    EXPECT_NEAR(gib, r.measured_gib, 0.01 * r.measured_gib)
        << r.model << (r.checkpointing ? " checkpointed" : "");
  }
}

// Step time from the H100 preset's achieved rates (--gpu h100, the
// default): GPT-2's 75 ms is what the memory rate was fitted to; the
// checkpointed GPT-2 step (87-93 ms measured) checks it. Qwen2.5-0.5B's
// step is modeled 25% long (202 ms against 157-167): its larger matmuls
// run faster than GPT-2's and its loss section moves less than modeled,
// and no trace of it separates the two (docs/plan.md, "Step time").
TEST(PlanCalibration, StepTimesFromTheH100PresetMatchTheRuns) {
  struct run {
    const char* model;
    std::uint64_t batch;
    std::uint64_t seq;
    bool checkpointing;
    double low_ms;
    double high_ms;
  };
  for (const run& r : {run{"gpt2", 8, 1024, false, 71, 79}, run{"gpt2", 8, 1024, true, 85, 95},
                       run{"qwen2.5-0.5b", 4, 2048, false, 150, 210}}) {
    const plan_setup s = calibration_run(r.model, r.batch, r.seq, r.checkpointing);
    auto t = simulate_step_time(s);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    const double ms = t->total() * 1e3;
    EXPECT_GE(ms, r.low_ms) << r.model << (r.checkpointing ? " checkpointed" : "");
    EXPECT_LE(ms, r.high_ms) << r.model << (r.checkpointing ? " checkpointed" : "");
  }
}

// fp32 keeps every activation in 4 bytes: twice bf16's, layer by layer.
TEST(PlanCalibration, Fp32ActivationsAreTwiceBf16s) {
  plan_setup s = preset("gpt2");
  s.micro_batch = 8;
  s.seq = 1024;
  const std::uint64_t bf16 = layer_activation_bytes(s);
  s.dtype = precision::fp32;
  const std::uint64_t fp32 = layer_activation_bytes(s);
  EXPECT_GT(fp32, bf16 + bf16 * 9 / 10)
      << "about twice: masks and fp32 statistics stay as they are";
  EXPECT_LE(fp32, 2 * bf16);
}

// The models of PyTorch's allocators, replayed over the H100 and H200
// snapshots' own requests, reserve what PyTorch reported there: 15.77 and
// 40.96 GiB (default), 14.68 and 40.07 GiB (expandable segments) on both
// cards, and 8.35 GiB (default) for the H200's checkpointed GPT-2 (its
// expandable run was not measured: 0).
TEST(PlanCalibration, PyTorchAllocatorModelsMatchTheSnapshots) {
  struct snapshot {
    const char* file;
    double native_gib;
    double expandable_gib;
  };
  const std::string traces = std::string(STRATA_SOURCE_DIR) + "/bench/traces/";
  for (const snapshot& c :
       {snapshot{"h100/gpt2_b8_s1024_amp_sdpa_pytorch2.11.pickle", 15.77, 14.68},
        snapshot{"h100/qwen2.5-0.5b_b4_s2048_amp_sdpa_pytorch2.11.pickle", 40.96, 40.07},
        snapshot{"h200/gpt2_b8_s1024_amp_sdpa_pytorch2.11.pickle", 15.77, 14.68},
        snapshot{"h200/qwen2.5-0.5b_b4_s2048_amp_sdpa_pytorch2.11.pickle", 40.96, 40.07},
        snapshot{"h200/gpt2_b8_s1024_amp_sdpa_ckpt_pytorch2.11.pickle", 8.35, 0}}) {
    auto t = replay::read_trace(traces + c.file, 0);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    ASSERT_TRUE(t->seeds.empty()) << "recorded from the start";
    for (const auto m :
         {pytorch_allocator_model::mode::native, pytorch_allocator_model::mode::expandable}) {
      const double gib = static_cast<double>(replay::modeled_peak_reserved(*t, m)) / (1ULL << 30);
      const double want =
          m == pytorch_allocator_model::mode::native ? c.native_gib : c.expandable_gib;
      if (want > 0) {
        EXPECT_NEAR(gib, want, 0.005 * want) << c.file;
      }
    }
  }
}

// The order of `ops` with each step's logits freed where the calibration's
// train.py frees them, `out = model(...)` dropping the previous step's as
// the next forward returns (just after that forward's fp32 copy of the
// logits goes), not where bench/torch_train.py's `out = step()` does (at
// the end of the next step). The logits are an allocation followed at once
// by one twice its size (their fp32 copy); at least 512 MiB.
std::vector<replay::trace_op> in_calibration_loop_order(const std::vector<replay::trace_op>& ops) {
  const auto free_of = [&](std::size_t i) {
    for (std::size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].kind == replay::op_kind::free && ops[j].addr == ops[i].addr) return j;
    }
    return ops.size();
  };
  std::vector<std::size_t> logits_freed;  // by step
  std::vector<std::size_t> copy_freed;
  for (std::size_t i = 0; i + 1 < ops.size(); ++i) {
    if (ops[i].kind == replay::op_kind::alloc && ops[i + 1].kind == replay::op_kind::alloc &&
        ops[i].size >= (512ULL << 20) && ops[i + 1].size == 2 * ops[i].size) {
      logits_freed.push_back(free_of(i));
      copy_freed.push_back(free_of(i + 1));
    }
  }
  std::unordered_map<std::size_t, std::size_t> moved_after;  // free -> the op it follows
  for (std::size_t k = 0; k + 1 < logits_freed.size(); ++k) {
    if (logits_freed[k] < ops.size()) moved_after[logits_freed[k]] = copy_freed[k + 1];
  }
  std::unordered_map<std::size_t, std::vector<std::size_t>> inserted;
  for (const auto& [from, after] : moved_after) inserted[after].push_back(from);
  std::vector<replay::trace_op> out;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!moved_after.contains(i)) out.push_back(ops[i]);
    for (const std::size_t m : inserted[i]) out.push_back(ops[m]);
  }
  return out;
}

// That order is the calibration run's stream: the H200's checkpointed GPT-2
// snapshot (bench/torch_train.py's loop), with its logits freed as
// train.py frees them, peaks at the H100 run's 7.22 GiB allocated, and
// PyTorch's model reserves its 8.35 GiB for it (the plan's schedule is
// judged against these numbers; docs/plan.md).
TEST(PlanCalibration, TheCheckpointedSnapshotInTheCalibrationLoopsOrderIsTheH100Run) {
  auto t =
      replay::read_trace(std::string(STRATA_SOURCE_DIR) +
                             "/bench/traces/h200/gpt2_b8_s1024_amp_sdpa_ckpt_pytorch2.11.pickle",
                         0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  const std::vector<replay::trace_op> ops = in_calibration_loop_order(t->ops);
  ASSERT_EQ(ops.size(), t->ops.size()) << "only moved, nothing lost";
  pytorch_allocator_model model(pytorch_allocator_model::mode::native);
  std::unordered_map<std::uint64_t, std::uint32_t> live;
  std::unordered_map<std::uint64_t, std::uint64_t> sizes;
  std::uint64_t bytes = 0;
  std::uint64_t peak = 0;
  std::uint64_t peak_as_recorded = 0;
  for (const replay::trace_op& op : t->ops) {  // the recorded order's peak, for contrast
    if (op.kind == replay::op_kind::alloc) {
      sizes[op.addr] = op.size;
      bytes += op.size;
      peak_as_recorded = std::max(peak_as_recorded, bytes);
    } else if (auto it = sizes.find(op.addr); it != sizes.end()) {
      bytes -= it->second;
      sizes.erase(it);
    }
  }
  bytes = 0;
  for (const replay::trace_op& op : ops) {
    if (op.kind == replay::op_kind::alloc) {
      live[op.addr] = model.allocate(op.size);
      sizes[op.addr] = op.size;
      bytes += op.size;
      peak = std::max(peak, bytes);
    } else if (auto it = live.find(op.addr); it != live.end()) {
      model.free(it->second);
      live.erase(it);
      bytes -= sizes[op.addr];
    }
  }
  const auto gib = [](std::uint64_t b) { return static_cast<double>(b) / (1ULL << 30); };
  EXPECT_NEAR(gib(peak_as_recorded), 7.99, 0.01) << "torch_train.py holds the logits a step longer";
  EXPECT_NEAR(gib(peak), 7.22, 0.01);
  EXPECT_NEAR(gib(model.peak_reserved()), 8.35, 0.01);
}

// The plan's PyTorch figures against what the calibration runs reserved
// (train.py's loop, which holds each step's logits in `out` into the next
// step's loss): within 10%, default allocator and expandable segments
// alike, with and without checkpointing (the checkpointed runs' expandable
// segments were not measured).
TEST(PlanCalibration, PyTorchFiguresMatchTheH100Runs) {
  struct run {
    const char* model;
    std::uint64_t batch;
    std::uint64_t seq;
    bool checkpointing;
    double native_gib;
    double expandable_gib;  // 0: not measured
    double tolerance;
  };
  for (const run& r : {run{"gpt2", 8, 1024, false, 15.77, 14.68, 0.10},
                       run{"qwen2.5-0.5b", 4, 2048, false, 40.96, 40.07, 0.10},
                       run{"gpt2", 8, 1024, true, 8.35, 0, 0.10},
                       run{"qwen2.5-1.5b", 2, 2048, true, 38.96, 0, 0.10}}) {
    const plan_setup s = calibration_run(r.model, r.batch, r.seq, r.checkpointing);
    auto p = make_plan(s);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    const std::string what = std::string(r.model) + (r.checkpointing ? " checkpointed" : "");
    const auto gib = [](std::uint64_t b) { return static_cast<double>(b) / (1ULL << 30); };
    EXPECT_NEAR(gib(p->pytorch.native), r.native_gib, r.tolerance * r.native_gib) << what;
    if (r.expandable_gib > 0) {
      EXPECT_NEAR(gib(p->pytorch.expandable), r.expandable_gib, r.tolerance * r.expandable_gib)
          << what;
    }
    EXPECT_GE(p->pytorch.native, p->memory.peak_tensors) << what;
    EXPECT_GE(p->pytorch.expandable, p->memory.peak_tensors) << what;
    const std::string json = plan_json(*p, {});
    EXPECT_NE(json.find("\"peak_reserved_pytorch_bytes\""), std::string::npos);
    EXPECT_NE(json.find("\"peak_reserved_expandable_bytes\""), std::string::npos);
    EXPECT_NE(json.find("\"peak_tensor_bytes\""), std::string::npos);
  }
}

// PyTorch's layout settles in the third step: Qwen2.5-0.5B's expandable
// segments grow there by 2.3 GiB (its H100 snapshot through the model),
// which a plan of two steps missed (37.41 GiB, 6.6% under the 40.07
// measured).
TEST(PlanCalibration, ExpandableSegmentsSettleInTheThirdStep) {
  auto p = make_plan(calibration_run("qwen2.5-0.5b", 4, 2048, false));
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  const double gib = static_cast<double>(p->pytorch.expandable) / (1ULL << 30);
  EXPECT_NEAR(gib, 40.07, 0.02 * 40.07);
}

}  // namespace
}  // namespace strata::plan
