// Range repair (allocator/page_repair.cpp) on a training-like loop: the
// previous step's logits outlive the next forward pass (as a Python
// variable holding the model's output does), gradients outlive their step
// until the next one's zero_grad, so the layout repeats every two steps and
// an earlier step's range for a request is often free but for a few pages
// live elsewhere. Every live block is stamped and checked; the steps after
// the first few must map nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "allocator/allocator_fixture.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = kib * kib;

struct block {
  void* p = nullptr;
  std::size_t n = 0;
  std::uint64_t seed = 0;
};

std::uint64_t calls_of(device& d, driver_call k) {
  return d.call_totals()[static_cast<std::size_t>(k)].calls;
}

std::uint64_t mapping_calls(device& d) {
  return calls_of(d, driver_call::map) + calls_of(d, driver_call::unmap) +
         calls_of(d, driver_call::set_access) + calls_of(d, driver_call::create_pages);
}

TEST(RangeRepair, ATrainingLoopKeepsItsBytesAndSettles) {
  auto a = make_allocator("sim:capacity=2GiB");
  ASSERT_TRUE(a);
  constexpr std::size_t layers = 64;
  constexpr int steps = 8;
  std::uint64_t next_seed = 1;
  const auto get = [&](std::size_t n) {
    auto p = a->malloc_async(n, nullptr);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    block b{p.ok() ? *p : nullptr, n, next_seed++};
    if (b.p != nullptr) stamp(b.p, b.n, b.seed);
    return b;
  };
  const auto put = [&](const block& b) {
    ASSERT_NE(b.p, nullptr);
    ASSERT_TRUE(stamped(b.p, b.n, b.seed))
        << "block of " << b.n << " bytes (seed " << b.seed << ") changed";
    ASSERT_TRUE(a->free_async(b.p, nullptr).ok());
  };
  std::vector<block> params;
  for (std::size_t l = 0; l < layers; ++l) params.push_back(get(6 * mib + l * 4 * kib));
  std::vector<block> grads;
  block last_logits;
  std::vector<std::uint64_t> per_step;
  for (int step = 0; step < steps; ++step) {
    const std::uint64_t start = mapping_calls(a->dev());
    // Forward: activations kept for backward, a temporary per layer.
    std::vector<block> acts;
    for (std::size_t l = 0; l < layers; ++l) {
      acts.push_back(get(3 * mib + l * 7 * kib + 512));
      const block tmp = get(5 * mib + l * 3 * kib);
      acts.push_back(get(2 * mib + l * 5 * kib + 1536));
      put(tmp);
    }
    const block logits = get(160 * mib + 512);
    if (last_logits.p != nullptr) put(last_logits);  // the previous output, dropped now
    const block logits32 = get(320 * mib + 1024);
    // zero_grad(set_to_none): last step's gradients go before backward.
    for (const block& g : grads) put(g);
    grads.clear();
    const block dlogits = get(320 * mib + 1024);
    put(logits32);
    put(dlogits);
    // Backward: a gradient per layer, activations freed in reverse.
    for (std::size_t l = layers; l-- > 0;) {
      const block tmp = get(4 * mib + l * 9 * kib);
      grads.push_back(get(6 * mib + l * 4 * kib));
      put(acts[2 * l + 1]);
      put(tmp);
      put(acts[2 * l]);
    }
    last_logits = logits;
    for (const block& p : params) ASSERT_TRUE(stamped(p.p, p.n, p.seed)) << "step " << step;
    for (const block& g : grads) ASSERT_TRUE(stamped(g.p, g.n, g.seed)) << "step " << step;
    ASSERT_TRUE(stamped(last_logits.p, last_logits.n, last_logits.seed)) << "step " << step;
    per_step.push_back(mapping_calls(a->dev()) - start);
  }
  for (int s = 0; s < steps; ++s) {
    std::printf("step %d: %llu memory driver calls\n", s,
                static_cast<unsigned long long>(per_step[static_cast<std::size_t>(s)]));
  }
  // Some step found its earlier logits range shadowed in places and
  // repaired it (the only unmaps here: nothing is trimmed, no arena runs
  // out of address space)...
  EXPECT_GT(calls_of(a->dev(), driver_call::unmap), 0U) << "no range was repaired";
  // ...and the layout settles: two alternating layouts, a range each,
  // every request back at its address (repairing one shared range every
  // step would cost ~120 calls a step here, forever).
  for (int s = steps - 3; s < steps; ++s) {
    EXPECT_EQ(per_step[static_cast<std::size_t>(s)], 0U) << "step " << s;
  }
  for (const block& p : params) put(p);
  for (const block& g : grads) put(g);
  put(last_logits);
}

}  // namespace
}  // namespace strata::testing
