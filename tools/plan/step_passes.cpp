// A micro-batch's forward and backward passes as PyTorch and transformers
// allocate them (docs/plan.md, "Activations"; the H100 snapshots).
#include "plan/step_passes.hpp"

#include <optional>
#include <string>
#include <vector>

namespace strata::plan {

namespace {

// ZeRO-3's gathered layers: a layer's parameters are gathered one layer
// ahead and freed after it (nothing without ZeRO-3).
class layer_gathers {
 public:
  layer_gathers(schedule_builder& b, std::uint64_t bytes) : b_(b), bytes_(bytes) {
    if (bytes_ > 0) next_ = b_.alloc(category::collective_buffers, bytes_);
  }
  // A layer starts: gathers the one after it (if `another`); returns its own.
  std::uint32_t begin(bool another) {
    const std::uint32_t mine = next_;
    if (bytes_ > 0 && another) next_ = b_.alloc(category::collective_buffers, bytes_);
    return mine;
  }
  void end(std::uint32_t mine) {
    if (bytes_ > 0) b_.free(mine);
  }

 private:
  schedule_builder& b_;
  std::uint64_t bytes_;
  std::uint32_t next_ = 0;
};

// cuBLAS's workspace on Hopper (PyTorch's default CUBLAS_WORKSPACE_CONFIG
// there, :4096:8): 32 MiB a handle, the two snapshots' 32 MiB blocks that
// are never freed.
constexpr std::uint64_t cublas_workspace = 32ULL << 20;

void make_workspace(schedule_builder& b, bool& made) {
  if (made) return;
  b.alloc(category::activations, cublas_workspace);
  made = true;
}

std::string micro_label(const plan_setup& s, std::uint64_t micro) {
  return s.grad_accum > 1 ? " (micro-batch " + std::to_string(micro + 1) + ")" : "";
}

// Makes a layer's forward tensors in order. `keep(op, id)` takes a tensor
// that stays (true); one it leaves passes, freed once the next is made.
// Returns the last passing tensor, still live.
template <class Keep>
std::optional<std::uint32_t> make_layer_ops(schedule_builder& b, const layer_plan& p, Keep keep) {
  std::optional<std::uint32_t> passing;
  for (const layer_op& op : p.ops) {
    const std::uint32_t id = b.alloc(category::activations, op.bytes);
    if (passing) b.free(*passing);
    passing.reset();
    if (!keep(op, id)) passing = id;
  }
  return passing;
}

// The embedding, in the weights' precision (the snapshots): the token
// lookup, and in the GPT-2 family the position lookup, their sum and its
// dropout. Layer 0's input (the dropped sum, or the lookup) and the
// dropout's mask are kept for backward, added to `saved`; the lookups
// GPT-2 leaves live to the forward's end, added to `lookups`. A frozen
// embedding (LoRA) has nothing saved: all of it goes at the forward's end.
void embed(schedule_builder& b, const plan_setup& s, const layer_plan& p,
           std::vector<std::uint32_t>& saved, std::vector<std::uint32_t>& lookups) {
  std::vector<std::uint32_t>& kept = s.lora_rank > 0 ? lookups : saved;
  const std::uint64_t th = p.checkpoint;  // bytes of the residual stream, batch x seq x hidden
  const std::uint32_t tokens = b.alloc(category::activations, th);
  if (s.model.gated_ffn) {
    kept.push_back(tokens);
    return;
  }
  lookups.push_back(tokens);
  lookups.push_back(b.alloc(category::activations, th / s.micro_batch));  // positions
  const std::uint32_t sum = b.alloc(category::activations, th);
  const std::uint64_t elements = s.micro_batch * s.seq * s.model.hidden;
  kept.push_back(b.alloc(category::activations, elements));  // the dropout's mask
  kept.push_back(b.alloc(category::activations, th));
  b.free(sum);
}

// transformers' loss over bf16 logits (amp's, and bf16 weights'; the
// H100 snapshots): the logits (`tv` elements), their fp32 copy for the
// loss, and cross-entropy's fp32 log-softmax, kept for backward (added to
// `head`); the copy goes once it is made. Returns the logits.
std::uint32_t bf16_logits_loss(schedule_builder& b, std::uint64_t tv,
                               std::vector<std::uint32_t>& head) {
  const std::uint32_t logits = b.alloc(category::activations, 2 * tv);
  const std::uint32_t upcast = b.alloc(category::activations, 4 * tv);
  head.push_back(b.alloc(category::activations, 4 * tv));  // log-softmax
  b.free(upcast);
  return logits;
}

// Its backward: the loss's gradient (fp32) and the log-softmax's, while
// `log_softmax` is still held; then the logits' in bf16, which the head's
// matmul takes. Returns that gradient.
std::uint32_t bf16_logits_gradient(schedule_builder& b, std::uint64_t tv,
                                   std::uint32_t log_softmax) {
  const std::uint32_t dloss = b.alloc(category::activations, 4 * tv);
  const std::uint32_t dsoftmax = b.alloc(category::activations, 4 * tv);
  b.free(dloss);
  b.free(log_softmax);
  const std::uint32_t dlogits = b.alloc(category::activations, 2 * tv);
  b.free(dsoftmax);
  return dlogits;
}

}  // namespace

void forward(schedule_builder& b, const plan_setup& s, const layer_plan& p, std::uint64_t micro,
             std::vector<std::uint32_t>& embedding, std::vector<std::vector<std::uint32_t>>& saved,
             std::uint32_t& logits, std::vector<std::uint32_t>& head, loop_state& loop) {
  const std::uint64_t layers = s.model.layers;
  const std::uint64_t tokens = s.micro_batch * s.seq;
  const std::string mb = micro_label(s, micro);
  b.phase("forward, embedding" + mb);
  std::uint32_t outer = 0;
  if (p.outer_gathered > 0) outer = b.alloc(category::collective_buffers, p.outer_gathered);
  std::vector<std::uint32_t> lookups;
  embed(b, s, p, embedding, lookups);
  layer_gathers gathers(b, p.gathered);
  if (p.outer_gathered > 0) b.free(outer);
  make_workspace(b, loop.forward_workspace);  // the first linear's
  // With checkpointing the forward keeps nothing for backward: a tensor
  // backward would have kept is one of the layer's locals instead, gone
  // when the layer's forward returns (the checkpointed snapshot: the
  // norms' outputs, the first residual and the dropped attention output
  // go at the layer's end), and the others go at their last use. The
  // GELU's intermediates go sooner in the snapshot (two 96 MiB at a time,
  // not three): held to the layer's end here, they stand for the
  // 96 MiB blocks the snapshot's forward leaves free, which PyTorch's
  // allocator then places the first step's gradients in. Autocast's
  // cache holds the weights' casts until the loss is made and autocast
  // exits (the casts of weights that require grad: not LoRA's frozen base).
  std::vector<std::uint32_t> casts;
  std::vector<std::uint32_t> cache;
  for (std::uint64_t l = 0; l < layers; ++l) {
    b.phase("forward, layer " + std::to_string(l) + mb);
    const std::uint32_t mine = gathers.begin(l + 1 < layers);
    std::vector<std::uint32_t> ids;
    std::vector<std::uint32_t> held_in_layer;
    std::optional<std::uint32_t> passing =
        make_layer_ops(b, p, [&](const layer_op& op, std::uint32_t id) {
          if (!op.kept) return false;  // a weight's cast is kept too
          if (op.cached && loop.hold) {
            cache.push_back(id);  // `out` keeps it past backward
          } else if (!s.checkpointing) {
            ids.push_back(id);
          } else if (op.weight_cast) {
            // Autocast caches the casts of weights that require grad; a
            // frozen one's (LoRA's base) is made for its matmul and goes.
            if (s.lora_rank > 0) return false;
            casts.push_back(id);
          } else {
            held_in_layer.push_back(id);  // a local of the layer's forward
          }
          return true;
        });
    for (const std::uint32_t id : held_in_layer) b.free(id);
    if (s.checkpointing) {
      // Only the layer's output stays, the next one's input (under amp the
      // fp32 residual, the last tensor made); the rest is recomputed in
      // backward.
      if (passing && b.bytes_of(*passing) == p.checkpoint) {
        ids = {*passing};
        passing.reset();
      } else {
        ids = {b.alloc(category::activations, p.checkpoint)};
      }
    }
    if (passing) b.free(*passing);
    saved.push_back(std::move(ids));
    gathers.end(mine);
  }
  b.phase("forward, logits and loss" + mb);
  for (const std::uint32_t id : lookups) b.free(id);
  if (p.outer_gathered > 0) outer = b.alloc(category::collective_buffers, p.outer_gathered);
  const std::uint64_t tv = tokens * s.model.vocab;
  if (s.dtype == precision::amp) {
    // Under autocast (the H100 snapshots): the final norm, the head's
    // input and (tied or not) weight cast to bf16, then the loss.
    const std::uint64_t th = tokens * s.model.hidden;
    head.push_back(b.alloc(category::activations, 4 * th + 8 * tokens));  // final norm
    head.push_back(b.alloc(category::activations, 2 * th));               // the head's input cast
    head.push_back(b.alloc(category::activations, 2 * s.model.vocab * s.model.hidden));
    logits = bf16_logits_loss(b, tv, head);
  } else if (s.dtype == precision::fp32) {
    // Plain fp32: the final norm (its output the head's input), the
    // logits (the loss's .float() makes no copy), cross-entropy's
    // log-softmax, kept for backward.
    const std::uint64_t th = tokens * s.model.hidden;
    head.push_back(b.alloc(category::activations, 4 * th + 8 * tokens));  // final norm
    logits = b.alloc(category::activations, 4 * tv);
    head.push_back(b.alloc(category::activations, 4 * tv));  // log-softmax
  } else {
    // bf16 weights, no autocast: as under amp without the casts, the
    // final norm's bf16 output being the head's input.
    const std::uint64_t th = tokens * s.model.hidden;
    head.push_back(b.alloc(category::activations, 2 * th + 8 * tokens));  // final norm
    logits = bf16_logits_loss(b, tv, head);
  }
  // `out` now takes this micro-batch's outputs, dropping the previous
  // ones; autocast exits.
  if (loop.logits) b.free(*loop.logits);
  loop.logits.reset();
  for (const std::uint32_t id : loop.cache) b.free(id);
  loop.cache = std::move(cache);
  for (const std::uint32_t id : casts) b.free(id);
  if (p.outer_gathered > 0) b.free(outer);
}

namespace {

void release_logits(schedule_builder& b, loop_state& loop, std::uint32_t logits) {
  if (loop.hold) {
    loop.logits = logits;
  } else {
    b.free(logits);
  }
}

// Checkpointing's recompute: the layer's forward again, tensor by tensor
// as the forward pass makes them (one that passes goes once the next is
// made), keeping what its backward needs and autocast's weight casts.
// Returns the kept tensors in the order made.
std::vector<std::uint32_t> recompute_layer(schedule_builder& b, const layer_plan& p) {
  std::vector<std::uint32_t> kept;
  const std::optional<std::uint32_t> passing =
      make_layer_ops(b, p, [&](const layer_op& op, std::uint32_t id) {
        if (!op.kept) return false;  // a weight's cast is kept too
        kept.push_back(id);
        return true;
      });
  if (passing) b.free(*passing);
  return kept;
}

// The backward through a layer (the snapshots' pattern: a stream of
// transient gradients the size of the tensors they flow through, none
// larger): from the last tensor kept to the first, the gradient through
// it is made, the one before goes, then the tensor. The weight casts go
// last, with the layer. `kept` lacks the cache's copies where the loop
// holds them (`cache_held`): they outlive backward.
void unwind_layer(schedule_builder& b, const layer_plan& p, const std::vector<std::uint32_t>& kept,
                  bool cache_held) {
  std::optional<std::uint32_t> grad;
  std::vector<std::uint32_t> casts;
  std::size_t k = kept.size();
  for (std::size_t j = p.ops.size(); j-- > 0;) {
    const layer_op& op = p.ops[j];
    if (!op.kept || (op.cached && cache_held)) continue;
    const std::uint32_t id = kept[--k];
    if (op.weight_cast) {
      casts.push_back(id);
      continue;
    }
    const std::uint32_t g = b.alloc(category::activations, op.bytes);
    if (grad) b.free(*grad);
    b.free(id);
    grad = g;
  }
  if (grad) b.free(*grad);
  for (const std::uint32_t id : casts) b.free(id);
}

// Plain PyTorch's gradients of `sizes`, made by the first micro-batch's
// backward (later ones accumulate into them), added to `made_grads`.
void make_gradients(schedule_builder& b, const std::vector<std::uint64_t>& sizes,
                    std::uint64_t micro, std::vector<std::uint32_t>& made_grads) {
  if (micro != 0) return;
  for (const std::uint64_t g : sizes) made_grads.push_back(b.alloc(category::gradients, g));
}

}  // namespace

void backward(schedule_builder& b, const plan_setup& s, const layer_plan& p, std::uint64_t micro,
              const std::vector<std::uint32_t>& embedding,
              std::vector<std::vector<std::uint32_t>>& saved, std::uint32_t logits,
              const std::vector<std::uint32_t>& head, std::vector<std::uint32_t>& made_grads,
              loop_state& loop) {
  const std::uint64_t layers = s.model.layers;
  const std::uint64_t tokens = s.micro_batch * s.seq;
  const std::string mb = micro_label(s, micro);
  b.phase("backward, loss and logits" + mb);
  std::uint32_t outer = 0;
  if (p.outer_gathered > 0) outer = b.alloc(category::collective_buffers, p.outer_gathered);
  const std::uint64_t tv = tokens * s.model.vocab;
  std::uint32_t dhidden = 0;
  if (s.dtype == precision::amp) {
    const std::uint32_t dlogits = bf16_logits_gradient(b, tv, head.back());
    // The head's matmul: the gradients of its bf16 weight cast and of its
    // bf16 input; the logits' gradient goes; the input's flows back to
    // fp32 through its cast; then the weight's fp32 gradient (and the rest
    // outside the layers) is made from the cast's (the checkpointed
    // snapshot's order: the logits' gradient is gone before the weight's
    // 147 MiB is placed).
    const std::uint64_t th = tokens * s.model.hidden;
    const std::uint32_t dweight_cast =
        b.alloc(category::activations, 2 * s.model.vocab * s.model.hidden);
    make_workspace(b, loop.backward_workspace);  // autograd's first matmul
    const std::uint32_t dinput_cast = b.alloc(category::activations, 2 * th);
    b.free(dlogits);
    dhidden = b.alloc(category::activations, 4 * th);
    b.free(dinput_cast);
    // The head's (or tied embedding's) gradient, and the rest outside.
    make_gradients(b, p.outer_grads_made, micro, made_grads);
    b.free(dweight_cast);
  } else if (s.dtype == precision::fp32) {
    // The loss's gradient, then the log-softmax's (the logits'); the
    // head's matmul makes the hidden state's gradient and, first time
    // round, the head's (or tied embedding's) and the rest outside.
    const std::uint32_t dloss = b.alloc(category::activations, 4 * tv);
    const std::uint32_t dlogits = b.alloc(category::activations, 4 * tv);
    b.free(dloss);
    b.free(head.back());                         // the log-softmax
    make_workspace(b, loop.backward_workspace);  // autograd's first matmul
    dhidden = b.alloc(category::activations, 4 * tokens * s.model.hidden);
    make_gradients(b, p.outer_grads_made, micro, made_grads);
    b.free(dlogits);
  } else {
    // bf16: the head's matmul makes the hidden state's gradient.
    const std::uint32_t dlogits = bf16_logits_gradient(b, tv, head.back());
    make_workspace(b, loop.backward_workspace);  // autograd's first matmul
    dhidden = b.alloc(category::activations, 2 * tokens * s.model.hidden);
    b.free(dlogits);
  }
  // The logits go (or stay with the loop), and what the loss kept beside
  // the log-softmax, which each branch freed where its gradient was made.
  release_logits(b, loop, logits);
  for (std::size_t i = 0; i + 1 < head.size(); ++i) b.free(head[i]);
  if (p.outer_gathered > 0) b.free(outer);
  layer_gathers gathers(b, p.gathered);
  for (std::uint64_t l = layers; l-- > 0;) {
    b.phase("backward, layer " + std::to_string(l) + mb);
    const std::uint32_t mine = gathers.begin(l > 0);
    // Plain PyTorch: the layer's gradients appear in its backward
    // (accumulated into by later micro-batches) and live to the next
    // step's zero_grad. Where in it moves no figure of the calibration
    // runs (tried: before the recompute, at the first linear, after it).
    const auto make_grads = [&] { make_gradients(b, p.layer_grads_made, micro, made_grads); };
    std::uint32_t layer_grads = 0;
    if (s.checkpointing) {
      // The layer's forward runs again first, as in the forward pass,
      // keeping what its backward needs; then its backward.
      make_grads();
      const std::vector<std::uint32_t> recomputed = recompute_layer(b, p);
      if (p.layer_grads > 0) layer_grads = b.alloc(category::gradients, p.layer_grads);
      unwind_layer(b, p, recomputed, false);
      for (const std::uint32_t id : saved[l]) b.free(id);
    } else {
      if (p.layer_grads > 0) layer_grads = b.alloc(category::gradients, p.layer_grads);
      make_grads();
      unwind_layer(b, p, saved[l], loop.hold);
    }
    if (p.layer_grads > 0) b.free(layer_grads);  // reduce-scattered into its fp32 partition
    gathers.end(mine);
  }
  // The embedding's backward; a tied embedding's gradient is a new tensor
  // there, added into the head's and freed (both snapshots).
  std::optional<std::uint32_t> tied;
  if (s.model.tied_embeddings && !p.outer_grads_made.empty()) {
    tied = b.alloc(category::activations, s.model.vocab * s.model.hidden * weight_bytes(s.dtype));
  }
  for (const std::uint32_t id : embedding) b.free(id);
  if (tied) b.free(*tied);
  b.free(dhidden);
}

}  // namespace strata::plan
