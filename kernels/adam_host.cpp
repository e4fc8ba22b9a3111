// The Adam/AdamW step on the host.
//
// Per element, in fp32 and in PyTorch's order of operations
// (torch.optim.Adam/AdamW, single-tensor path):
//   g = maximize ? -grad : grad
//   Adam:  g = g + wd * p                AdamW: p = p * (1 - lr * wd)
//   m = m * beta1 + (1 - beta1) * g
//   v = v * beta2 + ((1 - beta2) * g) * g
//   vmax = max(vmax, v)                  (amsgrad; the denominator uses it)
//   p = p + (-step_size) * (m / (sqrt(v) / sqrt(bias2) + eps))
// with the scalars computed once in double and rounded to fp32.
//
// Cost: 28 bytes moved per parameter with fp32 gradients (read p, g, m, v;
// write p, m, v), one sqrt and one division; the loop has no branch that
// depends on the data, so the compiler vectorizes it.
#include <cmath>
#include <cstring>

#include "argument_checks.hpp"
#include "float_formats.hpp"
#include "host_runners.hpp"
#include "kernel_arguments.hpp"
#include "strata/kernels.hpp"

namespace strata {

namespace kernels {

namespace {

template <dtype T>
float load(const void* base, std::size_t i) {
  if constexpr (T == dtype::f32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (T == dtype::bf16) {
    return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  } else {
    return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  }
}

template <dtype T>
void store(void* base, std::size_t i, float v) {
  if constexpr (T == dtype::f32) {
    static_cast<float*>(base)[i] = v;
  } else if constexpr (T == dtype::bf16) {
    static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(v);
  } else {
    static_cast<std::uint16_t*>(base)[i] = f32_to_f16(v);
  }
}

// One part of the step. `Out` is the type of params_out; `HasOut` false
// skips it; `Ams` selects amsgrad.
template <dtype G, bool HasOut, dtype Out, bool Ams>
void adam_part(void* context, std::size_t begin, std::size_t end) {
  const adam_args s = *static_cast<const adam_args*>(context);
  float* __restrict p = s.params;
  float* __restrict m = s.exp_avg;
  float* __restrict v = s.exp_avg_sq;
  float* __restrict vmax = s.max_exp_avg_sq;
  const void* grads = s.grads;
  void* out = s.params_out;
  for (std::size_t i = begin; i < end; ++i) {
    float g = s.sign * load<G>(grads, i);
    float param = p[i];
    // Loop-invariant branches: the compiler unswitches them.
    if (s.decoupled != 0) param = param * s.decay_factor;
    if (s.l2 != 0) g = g + s.weight_decay * param;
    const float mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    const float vi = v[i] * s.beta2 + (s.one_minus_beta2 * g) * g;
    float vd = vi;
    if constexpr (Ams) {
      vd = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vd;
    }
    const float denom = std::sqrt(vd) / s.bias2_sqrt + s.eps;
    param = param + s.neg_step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    p[i] = param;
    if constexpr (HasOut) store<Out>(out, i, param);
  }
}

template <dtype G, bool HasOut, dtype Out>
kernel_pool::range_fn pick_ams(bool ams) {
  return ams ? &adam_part<G, HasOut, Out, true> : &adam_part<G, HasOut, Out, false>;
}

template <dtype G>
kernel_pool::range_fn pick_out(const adam_args& a) {
  const bool ams = a.amsgrad != 0;
  if (a.params_out == nullptr) return pick_ams<G, false, dtype::f32>(ams);
  switch (static_cast<dtype>(a.out_type)) {
    case dtype::f32:
      return pick_ams<G, true, dtype::f32>(ams);
    case dtype::bf16:
      return pick_ams<G, true, dtype::bf16>(ams);
    case dtype::f16:
      return pick_ams<G, true, dtype::f16>(ams);
  }
  return nullptr;
}

}  // namespace

adam_args adam_args_of(const adam_tensors& t, const adam_options& o, std::uint64_t step) {
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  adam_args a{};
  a.params = t.params;
  a.grads = t.grads;
  a.exp_avg = t.exp_avg;
  a.exp_avg_sq = t.exp_avg_sq;
  a.max_exp_avg_sq = o.amsgrad ? t.max_exp_avg_sq : nullptr;
  // params_out == params as f32 writes the same value: no second store.
  const bool same = t.out_type == dtype::f32 && t.params_out == t.params;
  a.params_out = same ? nullptr : t.params_out;
  a.count = t.count;
  a.grad_type = static_cast<int>(t.grad_type);
  a.out_type = static_cast<int>(t.out_type);
  a.amsgrad = o.amsgrad ? 1 : 0;
  // As PyTorch: no weight-decay operation at all when it is 0.
  a.l2 = !o.decoupled_weight_decay && o.weight_decay != 0.0 ? 1 : 0;
  a.decoupled = o.decoupled_weight_decay && o.weight_decay != 0.0 ? 1 : 0;
  a.beta1 = static_cast<float>(o.beta1);
  a.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  a.beta2 = static_cast<float>(o.beta2);
  a.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  a.weight_decay = static_cast<float>(o.weight_decay);
  a.decay_factor = static_cast<float>(1.0 - o.lr * o.weight_decay);
  a.neg_step_size = static_cast<float>(-(o.lr / bias1));
  a.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  a.eps = static_cast<float>(o.eps);
  a.sign = o.maximize ? -1.0F : 1.0F;
  return a;
}

status check_adam(const adam_tensors& t, const adam_options& o, std::uint64_t step) {
  const char* k = "adam_step";
  if (step == 0) return invalid(k, "step must be at least 1 (the step after this update)");
  if (t.count == 0) return {};
  if (!count_fits(t.count, dtype::f32)) return invalid(k, "count too large");
  if (t.params == nullptr || t.grads == nullptr || t.exp_avg == nullptr ||
      t.exp_avg_sq == nullptr) {
    return invalid(k, "null params, grads, exp_avg or exp_avg_sq");
  }
  if (o.amsgrad && t.max_exp_avg_sq == nullptr) {
    return invalid(k, "amsgrad needs max_exp_avg_sq");
  }
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    return invalid(k, "betas must be in [0, 1)");
  }
  if (!(o.lr >= 0.0) || !(o.eps >= 0.0) || !(o.weight_decay >= 0.0)) {
    return invalid(k, "lr, eps and weight_decay must be non-negative numbers");
  }
  const std::size_t f = t.count * sizeof(float);
  const std::size_t g = t.count * dtype_size(t.grad_type);
  const std::size_t out = t.count * dtype_size(t.out_type);
  const void* fp32[] = {t.params, t.exp_avg, t.exp_avg_sq, o.amsgrad ? t.max_exp_avg_sq : nullptr};
  for (std::size_t i = 0; i < 4; ++i) {
    if (fp32[i] == nullptr) continue;
    if (overlaps(fp32[i], f, t.grads, g)) return invalid(k, "grads overlap a state buffer");
    for (std::size_t j = i + 1; j < 4; ++j) {
      if (fp32[j] != nullptr && overlaps(fp32[i], f, fp32[j], f)) {
        return invalid(k, "params, exp_avg, exp_avg_sq and max_exp_avg_sq must not overlap");
      }
    }
    const bool same_params = i == 0 && t.params_out == t.params && t.out_type == dtype::f32;
    if (t.params_out != nullptr && !same_params && overlaps(fp32[i], f, t.params_out, out)) {
      return invalid(k, "params_out overlaps a state buffer");
    }
  }
  if (t.params_out != nullptr && overlaps(t.params_out, out, t.grads, g)) {
    return invalid(k, "params_out overlaps grads");
  }
  return {};
}

void run_adam(kernel_pool& pool, const adam_args& a) {
  kernel_pool::range_fn body = nullptr;
  switch (static_cast<dtype>(a.grad_type)) {
    case dtype::f32:
      body = pick_out<dtype::f32>(a);
      break;
    case dtype::bf16:
      body = pick_out<dtype::bf16>(a);
      break;
    case dtype::f16:
      body = pick_out<dtype::f16>(a);
      break;
  }
  // Parts of 16 Ki elements: whole cache lines and vectors, small enough to
  // balance.
  adam_args copy = a;
  pool.parallel_for(a.count, std::size_t{16} << 10, body, &copy);
}

}  // namespace kernels

status adam_step_host(kernel_pool& pool, const adam_tensors& t, const adam_options& o,
                      std::uint64_t step) {
  if (auto s = kernels::check_adam(t, o, step); !s) return s;
  if (t.count == 0) return {};
  kernels::run_adam(pool, kernels::adam_args_of(t, o, step));
  return {};
}

}  // namespace strata
