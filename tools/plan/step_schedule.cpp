#include "plan/step_schedule.hpp"

#include <algorithm>
#include <vector>

#include "plan/layer_activations.hpp"
#include "plan/step_passes.hpp"

namespace strata::plan {

namespace {

layer_plan plan_layer(const plan_setup& s) {
  layer_plan p;
  const std::uint64_t w = weight_bytes(s.dtype);
  const std::uint64_t trainable_per_layer =
      s.lora_rank > 0 ? trainable_params(s) / std::max<std::uint64_t>(s.model.layers, 1)
                      : layer_params(s.model);
  if (s.zero == 3) {
    p.gathered = layer_params(s.model) * w;
    p.outer_gathered = outer_params(s.model) * w;
    p.layer_grads = trainable_per_layer * w;
  }
  // Gradients that stream to an offloaded optimizer go through two
  // bucket-sized staging buffers (Strata's 25 MiB buckets, double-buffered).
  if (s.zero > 0 && s.zero < 3 && s.optimizer != offload_to::none) p.buckets = 2 * (25ULL << 20);
  p.ops = layer_forward_ops(s);
  // The layer's input: bf16, or fp32 (fp32, and amp's residual stream).
  p.checkpoint =
      (s.dtype == precision::bf16_mixed ? 2 : 4) * s.micro_batch * s.seq * s.model.hidden;
  if (gradients_made_in_backward(s)) {
    if (s.lora_rank > 0) {
      p.layer_grads_made = {trainable_per_layer * w};  // the adapters'
    } else {
      for (const std::uint64_t n : layer_param_tensors(s.model))
        p.layer_grads_made.push_back(n * w);
      for (const std::uint64_t n : outer_param_tensors(s.model))
        p.outer_grads_made.push_back(n * w);
    }
  }
  return p;
}

// Forward and backward of each micro-batch (at most two: later ones repeat
// the second); gradients made in backward are added to `made_grads`.
void micro_batches(schedule_builder& b, const plan_setup& s, const layer_plan& p,
                   std::vector<std::uint32_t>& made_grads, loop_state& loop) {
  for (std::uint64_t micro = 0; micro < std::min<std::uint64_t>(s.grad_accum, 2); ++micro) {
    std::vector<std::uint32_t> embedding;
    std::vector<std::vector<std::uint32_t>> saved;
    std::uint32_t logits = 0;
    std::vector<std::uint32_t> head;
    forward(b, s, p, micro, embedding, saved, logits, head, loop);
    backward(b, s, p, micro, embedding, saved, logits, head, made_grads, loop);
  }
}

// AdamW goes through the parameters in their order (the embedding's, then
// layer 0's and on) where backward made their gradients the other way:
// the outer ones at the loss, then the layers' from the last.
std::vector<std::uint32_t> parameter_order(const std::vector<std::uint32_t>& grads,
                                           const layer_plan& p) {
  const std::size_t outer = std::min(p.outer_grads_made.size(), grads.size());
  const std::size_t per_layer = p.layer_grads_made.size();
  std::vector<std::uint32_t> out(grads.begin(), grads.begin() + static_cast<std::ptrdiff_t>(outer));
  std::size_t end = grads.size();
  for (; per_layer > 0 && end >= outer + per_layer; end -= per_layer) {
    out.insert(out.end(), grads.begin() + static_cast<std::ptrdiff_t>(end - per_layer),
               grads.begin() + static_cast<std::ptrdiff_t>(end));
  }
  out.insert(out.end(), grads.begin() + static_cast<std::ptrdiff_t>(outer),
             grads.begin() + static_cast<std::ptrdiff_t>(end));
  return out;
}

// Plain PyTorch on one GPU (gradients_made_in_backward): the parameters
// held all along; a first step without optimizer state, whose optimizer
// step makes Adam's two moments tensor by tensor (AdamW's lazy state),
// zero_grad freeing the gradients; then the steps every later one
// repeats. A step's layout is what the next one's tensors find, and the
// outputs the loop holds alternate between two places, so PyTorch's
// layout settles only in the third and fourth steps: the H100 snapshots'
// expandable segments grow in their third step (Qwen2.5: by 2.3 GiB) and
// by at most 0.08 GiB after it, to the eighth step of an H200 one.
constexpr int plain_pytorch_step_count = 4;

step_schedule plain_pytorch_steps(const plan_setup& s) {
  step_schedule out;
  schedule_builder b(out);
  b.phase("model states");
  const std::uint64_t w = weight_bytes(s.dtype);
  for (std::uint64_t l = 0; l < s.model.layers; ++l) {
    for (const std::uint64_t n : layer_param_tensors(s.model)) b.alloc(category::parameters, n * w);
  }
  for (const std::uint64_t n : outer_param_tensors(s.model)) b.alloc(category::parameters, n * w);
  const layer_plan p = plan_layer(s);
  loop_state loop;
  loop.hold = true;
  for (int step = 0; step < plain_pytorch_step_count; ++step) {
    std::vector<std::uint32_t> grads;
    micro_batches(b, s, p, grads, loop);
    b.phase(step == 0 ? "optimizer step (Adam's state made)" : "optimizer step");
    const std::vector<std::uint32_t> ordered = parameter_order(grads, p);
    if (step == 0) {
      for (const std::uint32_t g : ordered) {
        const std::uint64_t bytes = b.bytes_of(g);
        b.alloc(category::optimizer_state, bytes);  // exp_avg
        b.alloc(category::optimizer_state, bytes);  // exp_avg_sq
      }
    }
    // AdamW's foreach update: sqrt(exp_avg_sq) for every parameter at
    // once, then the update; the square roots go at the end.
    std::vector<std::uint32_t> roots;
    roots.reserve(ordered.size());
    for (const std::uint32_t g : ordered)
      roots.push_back(b.alloc(category::optimizer_state, b.bytes_of(g)));
    for (const std::uint32_t r : roots) b.free(r);
    for (const std::uint32_t g : grads) b.free(g);  // zero_grad(set_to_none=True)
  }
  return out;
}

}  // namespace

step_schedule make_step_schedule(const plan_setup& s) {
  if (gradients_made_in_backward(s)) return plain_pytorch_steps(s);
  step_schedule out;
  schedule_builder b(out);
  b.phase("model states");
  for (const held_tensor& t : model_state_tensors(s)) {
    if (t.where == place::gpu) b.alloc(t.what, t.bytes);  // held all step
  }
  const layer_plan p = plan_layer(s);
  std::vector<std::uint32_t> buckets;
  if (p.buckets > 0) {
    buckets.push_back(b.alloc(category::collective_buffers, p.buckets / 2));
    buckets.push_back(b.alloc(category::collective_buffers, p.buckets / 2));
  }
  std::vector<std::uint32_t> made_grads;
  loop_state loop;  // DeepSpeed's and FSDP's loops: no calibration run says what they hold
  micro_batches(b, s, p, made_grads, loop);
  b.phase("optimizer step");
  for (const std::uint32_t id : buckets) b.free(id);
  for (const std::uint32_t id : made_grads) b.free(id);  // the next step's zero_grad
  return out;
}

}  // namespace strata::plan
