// The pieces a step schedule is built from (step_schedule.cpp): the
// builder of its event list, what one layer makes, what a training loop
// carries between micro-batches, and the forward and backward passes of
// a micro-batch (step_passes.cpp). Private to tools/plan.
//
// Thread safety: a builder is used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/layer_activations.hpp"
#include "plan/step_schedule.hpp"

namespace strata::plan {

// Builds the event list; ids are handed out in allocation order.
class schedule_builder {
 public:
  explicit schedule_builder(step_schedule& out) : out_(out) {}
  std::uint32_t alloc(category c, std::uint64_t bytes) {
    const std::uint32_t id = out_.tensors++;
    out_.events.push_back({step_event::kind::alloc, c, id, bytes});
    sizes_.push_back(bytes);
    return id;
  }
  [[nodiscard]] std::uint64_t bytes_of(std::uint32_t id) const { return sizes_[id]; }
  void free(std::uint32_t id) { out_.events.push_back({step_event::kind::free, {}, id, 0}); }
  void phase(std::string text) {
    out_.events.push_back(
        {step_event::kind::phase, {}, static_cast<std::uint32_t>(out_.phases.size()), 0});
    out_.phases.push_back(std::move(text));
  }

 private:
  step_schedule& out_;
  std::vector<std::uint64_t> sizes_;  // by tensor id
};

struct layer_plan {
  std::uint64_t gathered = 0;        // ZeRO-3: one layer's whole parameters (0 otherwise)
  std::uint64_t outer_gathered = 0;  // ZeRO-3: the embedding and head
  std::uint64_t layer_grads = 0;     // ZeRO-3: one layer's whole gradients, before reduce-scatter
  std::uint64_t buckets = 0;         // gradient buckets' staging (0: views)
  std::vector<layer_op> ops;         // what its forward makes, in order
  std::uint64_t checkpoint = 0;      // with checkpointing: the layer's input
  // Plain PyTorch: the gradients' tensors (bytes) each layer's backward
  // makes, and the head's (the outer parameters'); empty otherwise.
  std::vector<std::uint64_t> layer_grads_made;
  std::vector<std::uint64_t> outer_grads_made;
};

// What a training loop carries from one micro-batch to the next.
// `out = model(...)` (the calibration runs, bench/torch_train.py) holds
// each micro-batch's logits and key/value cache until the next one's loss
// is made, so they are live through its forward (both H100 snapshots show
// it: the logits go there, then the cache's K and V layer by layer); the
// holes they leave shape PyTorch's layout. And cuBLAS's workspaces, made
// through PyTorch's allocator at a thread's first matmul and kept: one
// for the forward's thread, one for autograd's.
struct loop_state {
  bool hold = false;                    // plain PyTorch: the loop's `out` keeps its outputs
  std::optional<std::uint32_t> logits;  // the previous micro-batch's, while held
  std::vector<std::uint32_t> cache;     // and its cache's tensors
  bool forward_workspace = false;       // made
  bool backward_workspace = false;
};

// A micro-batch's forward pass: the embedding (kept tensors added to
// `embedding`), each layer (what its backward needs added to `saved`, one
// list a layer), the logits (`logits`) and the loss (what its backward
// needs added to `head`); the loop's held outputs of the previous
// micro-batch go once this one's loss is made.
void forward(schedule_builder& b, const plan_setup& s, const layer_plan& p, std::uint64_t micro,
             std::vector<std::uint32_t>& embedding, std::vector<std::vector<std::uint32_t>>& saved,
             std::uint32_t& logits, std::vector<std::uint32_t>& head, loop_state& loop);

// Its backward pass, freeing what forward kept (the logits are held by the
// loop when it holds its outputs); plain PyTorch's gradients made on the
// first micro-batch are added to `made_grads`.
void backward(schedule_builder& b, const plan_setup& s, const layer_plan& p, std::uint64_t micro,
              const std::vector<std::uint32_t>& embedding,
              std::vector<std::vector<std::uint32_t>>& saved, std::uint32_t logits,
              const std::vector<std::uint32_t>& head, std::vector<std::uint32_t>& made_grads,
              loop_state& loop);

}  // namespace strata::plan
