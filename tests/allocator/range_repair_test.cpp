// Range repair (allocator/page_repair.cpp) on a training-like loop: the
// previous step's logits outlive the next forward pass (as a Python
// variable holding the model's output does), gradients outlive their step
// until the next one's zero_grad, so the layout repeats every two steps and
// an earlier step's range for a request is often free but for a few pages
// live elsewhere. Every live block is stamped and checked; the steps after
// the first few must map nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
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

// A training step's requests, repeated: 64 layers (about 330 large
// requests a step, past step_replay::min_period), the last step's logits
// dropped only after this step's, gradients dropped at the next step's
// zero_grad. Every block is stamped when made and checked when freed.
class training_loop {
 public:
  static constexpr std::size_t layers = 64;

  explicit training_loop(caching_allocator& a) : a_(a) {
    for (std::size_t l = 0; l < layers; ++l) params_.push_back(get(6 * mib + l * 4 * kib));
  }
  training_loop(const training_loop&) = delete;
  training_loop& operator=(const training_loop&) = delete;
  training_loop(training_loop&&) = delete;
  training_loop& operator=(training_loop&&) = delete;
  ~training_loop() {
    for (const block& p : params_) put(p);
    for (const block& g : grads_) put(g);
    put(last_logits_);
  }

  // With `injected` set, a request may fail with that error only (the
  // block is then left out); any other failure fails the test.
  void expect_failures(errc injected) { injected_ = injected; }
  [[nodiscard]] int failures() const { return failures_; }

  void step() {
    std::vector<block> acts;  // forward: activations kept, a temporary per layer
    for (std::size_t l = 0; l < layers; ++l) {
      acts.push_back(get(3 * mib + l * 7 * kib + 512));
      const block tmp = get(5 * mib + l * 3 * kib);
      acts.push_back(get(2 * mib + l * 5 * kib + 1536));
      put(tmp);
    }
    const block logits = get(160 * mib + 512);
    put(last_logits_);  // the previous output, dropped now
    const block logits32 = get(320 * mib + 1024);
    for (const block& g : grads_) put(g);  // zero_grad(set_to_none)
    grads_.clear();
    const block dlogits = get(320 * mib + 1024);
    put(logits32);
    put(dlogits);
    for (std::size_t l = layers; l-- > 0;) {  // backward, activations freed in reverse
      const block tmp = get(4 * mib + l * 9 * kib);
      grads_.push_back(get(6 * mib + l * 4 * kib));
      put(acts[2 * l + 1]);
      put(tmp);
      put(acts[2 * l]);
    }
    last_logits_ = logits;
    for (const block& p : params_) check(p);
    for (const block& g : grads_) check(g);
    check(last_logits_);
  }

 private:
  block get(std::size_t n) {
    auto p = a_.malloc_async(n, nullptr);
    block b{nullptr, n, next_seed_++};
    if (!p.ok()) {
      EXPECT_TRUE(injected_.has_value() && p.code() == *injected_) << p.error().to_string();
      ++failures_;
      return b;
    }
    b.p = *p;
    stamp(b.p, b.n, b.seed);
    return b;
  }
  static void check(const block& b) {
    if (b.p == nullptr) return;
    EXPECT_TRUE(stamped(b.p, b.n, b.seed))
        << "block of " << b.n << " bytes (seed " << b.seed << ") changed";
  }
  void put(const block& b) {
    if (b.p == nullptr) return;
    check(b);
    EXPECT_TRUE(a_.free_async(b.p, nullptr).ok());
  }

  caching_allocator& a_;
  std::uint64_t next_seed_ = 1;
  std::vector<block> params_;
  std::vector<block> grads_;
  block last_logits_;
  std::optional<errc> injected_;
  int failures_ = 0;
};

TEST(RangeRepair, ATrainingLoopKeepsItsBytesAndSettles) {
  auto a = make_allocator("sim:capacity=2GiB");
  ASSERT_TRUE(a);
  constexpr std::size_t steps = 8;
  std::vector<std::uint64_t> per_step;
  {
    training_loop loop(*a);
    for (std::size_t s = 0; s < steps; ++s) {
      const std::uint64_t start = memory_calls(a->dev());
      loop.step();
      per_step.push_back(memory_calls(a->dev()) - start);
      std::printf("step %zu: %llu memory driver calls\n", s,
                  static_cast<unsigned long long>(per_step.back()));
    }
  }
  // Some step found its earlier logits range shadowed in places and
  // repaired it (the only unmaps here: nothing is trimmed, no arena runs
  // out of address space)...
  EXPECT_GT(calls_of(a->dev(), driver_call::unmap), 0U) << "no range was repaired";
  // ...and the layout settles: two alternating layouts, a range each,
  // every request back at its address (repairing one shared range every
  // step would cost ~120 calls a step here, forever).
  for (std::size_t s = steps - 3; s < steps; ++s) EXPECT_EQ(per_step[s], 0U) << "step " << s;
}

// With 8 MiB page runs a repair unmaps whole runs (the sim refuses any
// other unmap), and only where every page of the run there is unused:
// every block keeps its bytes, and every run goes back at the end.
TEST(RangeRepair, RepairsUnmapWholeRuns) {
  allocator_options o;
  o.page_run_size = 8 * mib;
  auto a = make_allocator("sim:capacity=2GiB", o);
  ASSERT_TRUE(a);
  {
    training_loop loop(*a);
    for (std::size_t s = 0; s < 6; ++s) loop.step();
  }
  EXPECT_GT(calls_of(a->dev(), driver_call::unmap), 0U) << "no range was repaired";
  EXPECT_LT(calls_of(a->dev(), driver_call::create_pages), stat_of(*a, "segment.all.peak"))
      << "runs of several pages were made";
  ASSERT_TRUE(a->empty_cache().ok());
  EXPECT_EQ(stat_of(*a, "reserved_bytes.all.current"), 0);
}

// A map that fails in steps 2 and 3, where the repairs are. A repair whose
// map fails leaves its range free and first fit places the request (it
// does not fail); elsewhere the request fails with the device's error.
// Either way nothing else changes: no block loses a byte, the loop goes
// on, no page is lost.
TEST(RangeRepair, AMapFailingInARepairLosesNothing) {
  int absorbed = 0;  // runs whose failed map was a repair's, absorbed by first fit
  for (const std::size_t fail_step : {2U, 3U}) {
    for (const std::uint64_t after : {0U, 3U, 10U, 40U}) {
      auto a = make_allocator("sim:capacity=2GiB");
      ASSERT_TRUE(a);
      {
        training_loop loop(*a);
        for (std::size_t s = 0; s < 6; ++s) {
          // Steps 2 to 5 map far more than 40 pages: the fault fires.
          if (s == fail_step) loop.expect_failures(fail_map_after(a->dev(), after));
          loop.step();
        }
        EXPECT_LE(loop.failures(), 1) << "step " << fail_step << ", map " << after;
        if (loop.failures() == 0) ++absorbed;
      }
      ASSERT_TRUE(a->empty_cache().ok());
      auto info = a->dev().get_memory_info();
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->free, info->total) << "a page was lost";
    }
  }
  std::printf("%d of 8 failed maps fell in a repair\n", absorbed);
  EXPECT_GT(absorbed, 0) << "no fault fell in a repair: move the faults";
}

}  // namespace
}  // namespace strata::testing
