#include "plan/memory_traffic.hpp"

#include "plan/layer_activations.hpp"

namespace strata::plan {

namespace {

// Bytes moved per byte a layer's forward makes: written, then read.
constexpr double per_made_byte = 2.0;
// Forward bytes per logit in the loss section: the fp32 cast (2 read, 4
// written), the shifted copy (4, 4), log-softmax (4 read for the max, 4
// for the sum, 4 read and 4 written for the output).
constexpr double loss_forward_per_logit = 30.0;
// foreach AdamW over fp32 parameters, gradients and both moments.
constexpr double adam_per_param = 80.0;

}  // namespace

memory_traffic memory_traffic_of(const plan_setup& s) {
  memory_traffic t;
  double made = 0;
  for (const layer_op& op : layer_forward_ops(s)) made += static_cast<double>(op.bytes);
  t.layer = per_made_byte * made;
  const double logits = static_cast<double>(s.micro_batch) * static_cast<double>(s.seq) *
                        static_cast<double>(s.model.vocab);
  t.head = loss_forward_per_logit * logits;
  t.optimizer_per_param = adam_per_param;
  return t;
}

}  // namespace strata::plan
