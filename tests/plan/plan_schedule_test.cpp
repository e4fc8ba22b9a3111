// strata plan's step schedule: the tensors PyTorch and transformers
// allocate, op by op, as the shared snapshots show them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "plan/layer_activations.hpp"
#include "plan/planner.hpp"
#include "plan/step_run.hpp"
#include "plan/step_schedule.hpp"
#include "plan_setups.hpp"

namespace strata::plan {
namespace {

// transformers' loss is the same with bf16 weights as under autocast (its
// `.float()` copies the bf16 logits either way): at most two fp32 logits
// tensors live in forward (the copy and the kept log-softmax) and three in
// backward (the log-softmax, the loss's gradient and the log-softmax's),
// beside the bf16 logits.
TEST(PlanSchedule, TheLossKeepsTheSameTensorsWithBf16WeightsAsUnderAmp) {
  for (const precision d : {precision::amp, precision::bf16_mixed}) {
    plan_setup s = amp_setup("gpt2", 2, 256);
    s.dtype = d;
    if (d == precision::bf16_mixed) {
      s.gpus = 2;
      s.zero = 2;
    }
    const step_schedule sched = make_step_schedule(s);
    const std::uint64_t tv = s.micro_batch * s.seq * s.model.vocab;
    std::vector<std::uint64_t> size(sched.tensors, 0);
    std::string phase;
    int fp32_live = 0;
    int bf16_live = 0;
    int forward_most = 0;
    int backward_most = 0;
    for (const step_event& e : sched.events) {
      if (e.what == step_event::kind::phase) {
        phase = sched.phases[e.id];
        continue;
      }
      if (e.what == step_event::kind::alloc) size[e.id] = e.bytes;
      const int delta = e.what == step_event::kind::alloc ? 1 : -1;
      if (size[e.id] == 4 * tv) fp32_live += delta;
      if (size[e.id] == 2 * tv) bf16_live += delta;
      if (phase == "forward, logits and loss") forward_most = std::max(forward_most, fp32_live);
      if (phase == "backward, loss and logits" && bf16_live > 0) {
        backward_most = std::max(backward_most, fp32_live);
      }
    }
    const char* what = d == precision::amp ? "amp" : "bf16";
    EXPECT_EQ(forward_most, 2) << what;
    EXPECT_EQ(backward_most, 3) << what;
  }
}

// Autocast caches the bf16 casts of weights that require grad (ATen's
// cached_cast), so a checkpointed forward holds them to the loss; LoRA's
// frozen base weights are cast for each matmul and the casts go. At the
// first loss (no optimizer state yet) full fine-tuning holds 2 bytes a
// layer parameter more than LoRA.
TEST(PlanSchedule, ACheckpointedForwardHoldsOnlyTrainableWeightsCasts) {
  const auto live_at_first_loss = [](std::uint64_t lora_rank) {
    plan_setup s = amp_setup("gpt2", 2, 256);
    s.checkpointing = true;
    s.lora_rank = lora_rank;
    const step_schedule sched = make_step_schedule(s);
    std::vector<std::uint64_t> size(sched.tensors, 0);
    std::uint64_t live = 0;
    for (const step_event& e : sched.events) {
      if (e.what == step_event::kind::phase) {
        if (sched.phases[e.id] == "forward, logits and loss") return live;
      } else if (e.what == step_event::kind::alloc) {
        size[e.id] = e.bytes;
        live += e.bytes;
      } else {
        live -= size[e.id];
      }
    }
    return live;
  };
  const plan_setup s = preset("gpt2");
  const auto casts = static_cast<double>(2 * layer_params(s.model) * s.model.layers);
  const auto more = static_cast<double>(live_at_first_loss(0) - live_at_first_loss(16));
  EXPECT_NEAR(more, casts, 0.02 * casts);
}

// The plan's device has a GPU's 2 MiB pages up to 128 GiB and larger ones
// above (at most 65536 pages: the allocator's bookkeeping is per page):
// 16 MiB at 1 TiB, whose coarser rounding adds under 2% to a step's peak.
TEST(PlanSchedule, AGpuOver128GibIsPlannedInLargerPages) {
  plan_setup s = amp_setup("gpt2", 8, 1024);
  s.context_memory = 2ULL << 20;  // usable: the GPU less one 2 MiB page
  const step_schedule sched = make_step_schedule(s);
  auto small = run_step(s, sched);
  ASSERT_TRUE(small.ok()) << small.error().to_string();
  EXPECT_EQ(small->usable, s.gpu_memory - (2ULL << 20));
  s.gpu_memory = 1ULL << 40;
  auto large = run_step(s, sched);
  ASSERT_TRUE(large.ok()) << large.error().to_string();
  EXPECT_EQ(large->usable, s.gpu_memory - (16ULL << 20)) << "rounded down to a 16 MiB page";
  EXPECT_GE(large->peak_reserved, small->peak_reserved);
  EXPECT_LE(static_cast<double>(large->peak_reserved),
            1.02 * static_cast<double>(small->peak_reserved));
}

// A training loop's `out` holds a step's logits into the next step: in
// the plain PyTorch schedule the first step's logits outlive its backward
// and are freed in the second step's loss, once that step's logits and
// fp32 copy are made and the copy freed.
TEST(PlanSchedule, TheLoopHoldsEachStepsLogitsIntoTheNextLoss) {
  plan_setup s = amp_setup("gpt2", 2, 256);
  const step_schedule sched = make_step_schedule(s);
  const std::uint64_t logits_bytes = 2 * s.micro_batch * s.seq * s.model.vocab;
  const std::uint64_t fp32_bytes = 2 * logits_bytes;
  std::vector<std::uint64_t> size(sched.tensors, 0);
  int losses = 0;  // "forward, logits and loss" phases entered
  bool in_loss = false;
  std::optional<std::uint32_t> first;  // the first step's logits
  int second_logits = 0;               // logits made in the second loss before the free
  int second_copies_freed = 0;         // fp32 blocks freed there before it
  bool freed_in_second_loss = false;
  for (const step_event& e : sched.events) {
    if (e.what == step_event::kind::phase) {
      in_loss = sched.phases[e.id] == "forward, logits and loss";
      if (in_loss) ++losses;
    } else if (e.what == step_event::kind::alloc) {
      size[e.id] = e.bytes;
      if (in_loss && e.bytes == logits_bytes) {
        if (losses == 1 && !first) first = e.id;
        if (losses == 2) ++second_logits;
      }
    } else if (first && e.id == *first) {
      freed_in_second_loss = in_loss && losses == 2;
      break;
    } else if (in_loss && losses == 2 && size[e.id] == fp32_bytes) {
      ++second_copies_freed;
    }
  }
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(freed_in_second_loss);
  EXPECT_EQ(second_logits, 1);
  EXPECT_EQ(second_copies_freed, 1);
}

// The loop's `out` holds the key/value cache with the logits: a step's
// cache copies (two a layer) outlive its backward and go in the next
// step's loss, just after its logits (the H100 snapshots' order); with
// checkpointing transformers makes no cache.
TEST(PlanSchedule, TheLoopHoldsEachStepsCacheWithItsLogits) {
  for (const bool checkpointing : {false, true}) {
    plan_setup s = amp_setup("gpt2", 2, 256);
    s.checkpointing = checkpointing;
    const step_schedule sched = make_step_schedule(s);
    const std::uint64_t logits_bytes = 2 * s.micro_batch * s.seq * s.model.vocab;
    const std::uint64_t cache_bytes = 2 * s.micro_batch * s.seq * s.model.hidden;  // K or V, bf16
    std::vector<std::string> phase_of_alloc(sched.tensors);
    std::vector<std::uint64_t> size(sched.tensors, 0);
    std::string phase;
    int losses = 0;
    std::optional<std::uint32_t> first_logits;
    std::vector<std::uint32_t> after_logits;  // what the second loss frees right after them
    bool logits_freed = false;
    for (const step_event& e : sched.events) {
      if (e.what == step_event::kind::phase) {
        phase = sched.phases[e.id];
        if (phase == "forward, logits and loss") ++losses;
      } else if (e.what == step_event::kind::alloc) {
        size[e.id] = e.bytes;
        phase_of_alloc[e.id] = phase;
        if (losses == 1 && e.bytes == logits_bytes && !first_logits) first_logits = e.id;
      } else if (logits_freed) {
        if (size[e.id] != cache_bytes) break;
        after_logits.push_back(e.id);
      } else if (first_logits && e.id == *first_logits) {
        logits_freed = true;
        EXPECT_EQ(losses, 2);
      }
    }
    ASSERT_TRUE(logits_freed);
    const std::size_t want = checkpointing ? 0 : 2 * s.model.layers;
    EXPECT_EQ(after_logits.size(), want) << (checkpointing ? "checkpointed" : "");
    for (const std::uint32_t id : after_logits) {
      EXPECT_EQ(phase_of_alloc[id].rfind("forward, layer ", 0), 0U) << "made in the first forward";
    }
  }
}

// Beyond the layers, as the snapshots show: two 32 MiB cuBLAS workspaces
// (the forward's thread's and autograd's) made in the first step and never
// freed, and the embedding's output kept from the forward's start to the
// end of backward.
TEST(PlanSchedule, CublasWorkspacesAndTheEmbeddingsOutput) {
  plan_setup s = amp_setup("qwen2.5-0.5b", 1, 512);
  const step_schedule sched = make_step_schedule(s);
  std::vector<std::uint64_t> size(sched.tensors, 0);
  std::vector<bool> freed(sched.tensors, false);
  std::vector<std::string> made_in(sched.tensors);
  std::vector<std::string> freed_in(sched.tensors);
  std::string phase;
  for (const step_event& e : sched.events) {
    if (e.what == step_event::kind::phase) {
      phase = sched.phases[e.id];
    } else if (e.what == step_event::kind::alloc) {
      size[e.id] = e.bytes;
      made_in[e.id] = phase;
    } else {
      freed[e.id] = true;
      freed_in[e.id] = phase;
    }
  }
  int workspaces = 0;
  int embeddings = 0;
  const std::uint64_t embedding_bytes = 4 * s.micro_batch * s.seq * s.model.hidden;  // fp32
  for (std::uint32_t id = 0; id < sched.tensors; ++id) {
    if (size[id] == 32ULL << 20 && !freed[id]) ++workspaces;
    if (size[id] == embedding_bytes && made_in[id] == "forward, embedding") {
      ++embeddings;
      if (freed[id]) {
        EXPECT_EQ(freed_in[id], "backward, layer 0");
      }
    }
  }
  EXPECT_EQ(workspaces, 2);
  EXPECT_EQ(embeddings, 4) << "one a step";
}

}  // namespace
}  // namespace strata::plan
