// The host Adam kernel against PyTorch's single-tensor Adam
// (kernel_references.hpp) in every mode: randomized sizes and values (fixed
// seed, printed on failure), unaligned starts and tails, special values,
// and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_references.hpp"
#include "strata/kernels.hpp"

namespace strata::testing {
namespace {

// --- Adam -------------------------------------------------------------------

struct adam_case {
  dtype grad = dtype::f32;
  dtype out = dtype::f32;
  bool has_out = false;
  adam_options o;
};

void check_adam_case(kernel_pool& pool, const adam_case& c, std::size_t n, std::size_t skew,
                     std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0F, 1.0F);
  // `skew` elements in: the kernel sees unaligned starts and tails.
  std::vector<float> p(n + skew);
  std::vector<float> m(n + skew);
  std::vector<float> v(n + skew);
  std::vector<float> vm(n + skew);
  std::vector<float> g32(n + skew);
  for (std::size_t i = 0; i < n + skew; ++i) {
    p[i] = dist(rng);
    m[i] = dist(rng) * 0.1F;
    v[i] = std::fabs(dist(rng)) * 0.01F;
    vm[i] = v[i] * (i % 3 == 0 ? 2.0F : 0.5F);
    g32[i] = dist(rng) * (i % 97 == 0 ? 1e4F : 1.0F);
  }
  std::vector<std::uint16_t> g16(n + skew);
  for (std::size_t i = 0; i < n + skew; ++i) {
    g16[i] = c.grad == dtype::bf16 ? ref_bf16(g32[i]) : ref_f16(g32[i]);
  }
  const void* g = c.grad == dtype::f32 ? static_cast<const void*>(g32.data() + skew)
                                       : static_cast<const void*>(g16.data() + skew);
  std::vector<float> rp(p.begin() + static_cast<std::ptrdiff_t>(skew), p.end());
  std::vector<float> rm(m.begin() + static_cast<std::ptrdiff_t>(skew), m.end());
  std::vector<float> rv(v.begin() + static_cast<std::ptrdiff_t>(skew), v.end());
  std::vector<float> rvm(vm.begin() + static_cast<std::ptrdiff_t>(skew), vm.end());
  std::vector<unsigned char> out((n + 1) * 4, 0xab);
  adam_tensors t;
  t.params = p.data() + skew;
  t.grads = g;
  t.grad_type = c.grad;
  t.exp_avg = m.data() + skew;
  t.exp_avg_sq = v.data() + skew;
  t.max_exp_avg_sq = c.o.amsgrad ? vm.data() + skew : nullptr;
  t.params_out = c.has_out ? out.data() + dtype_size(c.out) : nullptr;
  t.out_type = c.out;
  t.count = n;
  for (std::uint64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(adam_step_host(pool, t, c.o, step).ok());
    ref_adam(rp, g, c.grad, rm, rv, rvm, c.o, step);
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_LE(ulps(p[skew + i], rp[i]), 4)
        << "param " << i << ": " << p[skew + i] << " vs " << rp[i];
    ASSERT_LE(ulps(m[skew + i], rm[i]), 4) << "exp_avg " << i;
    ASSERT_LE(ulps(v[skew + i], rv[i]), 4) << "exp_avg_sq " << i;
    if (c.o.amsgrad) {
      ASSERT_LE(ulps(vm[skew + i], rvm[i]), 4) << "max_exp_avg_sq " << i;
    }
    if (c.has_out) {
      const unsigned char* o = out.data() + dtype_size(c.out) * (i + 1);
      if (c.out == dtype::f32) {
        float f = 0;
        std::memcpy(&f, o, 4);
        ASSERT_TRUE(same_float(f, p[skew + i])) << "params_out " << i;
      } else {
        std::uint16_t h = 0;
        std::memcpy(&h, o, 2);
        ASSERT_EQ(h, c.out == dtype::bf16 ? ref_bf16(p[skew + i]) : ref_f16(p[skew + i]))
            << "params_out " << i;
      }
    }
  }
  if (c.has_out) {
    // Nothing written before or after the output.
    for (std::size_t k = 0; k < dtype_size(c.out); ++k) ASSERT_EQ(out[k], 0xab);
    for (std::size_t k = (n + 1) * dtype_size(c.out); k < out.size(); ++k) ASSERT_EQ(out[k], 0xab);
  }
}

TEST(KernelAdam, MatchesTheScalarReferenceInEveryMode) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto pool = make_pool();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> sizes(1, 70000);
  int cases = 0;
  for (dtype grad : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (int out = 0; out < 4; ++out) {
      for (int mode = 0; mode < 4; ++mode) {
        adam_case c;
        c.grad = grad;
        c.has_out = out > 0;
        c.out = out == 2 ? dtype::bf16 : out == 3 ? dtype::f16 : dtype::f32;
        c.o.lr = 1e-3 * (1 + mode);
        c.o.weight_decay = mode == 0 ? 0.0 : 0.01 * mode;
        c.o.decoupled_weight_decay = mode == 2;
        c.o.amsgrad = mode == 3 || (out == 1 && mode == 1);
        c.o.maximize = mode == 1;
        const std::size_t n = cases % 5 == 0 ? cases % 17 + 1 : sizes(rng);
        SCOPED_TRACE("case " + std::to_string(cases) + ": n=" + std::to_string(n));
        check_adam_case(*pool, c, n, static_cast<std::size_t>(cases % 3), rng);
        ++cases;
      }
    }
  }
}

TEST(KernelAdam, SpecialValuesPropagateAsInTheReference) {
  auto pool = make_pool(1);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> g = {inf, -inf, nan, 0.0F, -0.0F, 1e-40F, 3e38F};
  const std::size_t n = g.size();
  std::vector<float> p(n, 1.0F);
  std::vector<float> m(n, 0.0F);
  std::vector<float> v(n, 0.0F);
  std::vector<float> none;
  std::vector<float> rp = p;
  std::vector<float> rm = m;
  std::vector<float> rv = v;
  adam_options o;
  o.weight_decay = 0.1;
  adam_tensors t{p.data(), g.data(), dtype::f32,  m.data(), v.data(),
                 nullptr,  nullptr,  dtype::bf16, n};
  ASSERT_TRUE(adam_step_host(*pool, t, o, 1).ok());
  ref_adam(rp, g.data(), dtype::f32, rm, rv, none, o, 1);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_float(p[i], rp[i]) || ulps(p[i], rp[i]) <= 4)
        << i << ": " << p[i] << " vs " << rp[i];
    EXPECT_TRUE(same_float(v[i], rv[i])) << i;
  }
}

TEST(KernelAdam, BadArgumentsAreRefusedAndNothingIsWritten) {
  auto pool = make_pool();
  std::vector<float> buf(64, 1.0F);
  std::vector<float> g(16, 0.5F);
  adam_tensors t{buf.data(), g.data(),    dtype::f32, buf.data() + 16, buf.data() + 32, nullptr,
                 nullptr,    dtype::bf16, 16};
  adam_options o;
  EXPECT_EQ(adam_step_host(*pool, t, o, 0).code(), errc::invalid_argument) << "step 0";
  o.amsgrad = true;
  EXPECT_EQ(adam_step_host(*pool, t, o, 1).code(), errc::invalid_argument) << "no amsgrad buffer";
  o.amsgrad = false;
  adam_tensors overlap = t;
  overlap.exp_avg = buf.data() + 8;
  EXPECT_EQ(adam_step_host(*pool, overlap, o, 1).code(), errc::invalid_argument);
  adam_tensors null_grad = t;
  null_grad.grads = nullptr;
  EXPECT_EQ(adam_step_host(*pool, null_grad, o, 1).code(), errc::invalid_argument);
  adam_tensors out_on_grads = t;
  out_on_grads.params_out = g.data();
  EXPECT_EQ(adam_step_host(*pool, out_on_grads, o, 1).code(), errc::invalid_argument);
  o.beta1 = 1.0;
  EXPECT_EQ(adam_step_host(*pool, t, o, 1).code(), errc::invalid_argument) << "beta1 = 1";
  for (float f : buf) ASSERT_EQ(f, 1.0F) << "a refused call wrote";
  // params_out == params as f32 is allowed (the same values).
  o = {};
  adam_tensors self = t;
  self.params_out = t.params;
  self.out_type = dtype::f32;
  EXPECT_TRUE(adam_step_host(*pool, self, o, 1).ok());
}

}  // namespace
}  // namespace strata::testing
