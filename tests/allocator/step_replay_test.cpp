// step_replay: which earlier request a new one repeats. Requests are
// recorded with made-up addresses; the class never touches memory.
#include "step_replay.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace strata::testing {
namespace {

constexpr std::size_t none = step_replay::none;

// A step of `n` requests whose sizes look like a model's: runs that repeat
// within the step (layers) among sizes that do not.
std::vector<std::size_t> step_sizes(std::size_t n) {
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < n; ++i) {
    sizes.push_back(i % 7 == 0 ? (i + 1) * 4096 : (1 + i % 5) * (std::size_t{1} << 20));
  }
  return sizes;
}

// Records `sizes` once, request i at `base + i * 64 KiB`; returns the
// counterpart each request found.
std::vector<std::size_t> run(step_replay& r, const std::vector<std::size_t>& sizes,
                             std::uintptr_t base) {
  r.reserve();  // as the allocator does before placing
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t c = r.counterpart(sizes[i]);
    found.push_back(c);
    r.record(sizes[i], base + i * 65536, c);
  }
  return found;
}

TEST(StepReplay, TheFirstStepRepeatsNothingAndTheThirdRepeatsTheSecond) {
  step_replay r;
  const auto sizes = step_sizes(400);
  for (std::size_t c : run(r, sizes, 0x10000000)) EXPECT_EQ(c, none);
  // The repeat is found within the second step, once a window of it
  // matches one of the first (a window every 8 is remembered, by content).
  const auto second = run(r, sizes, 0x20000000);
  EXPECT_EQ(second.front(), none);
  EXPECT_EQ(second.back(), sizes.size() - 1);
  const auto third = run(r, sizes, 0x30000000);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(third[i], 400 + i) << "request " << i;
    EXPECT_EQ(r.address(third[i]), 0x20000000 + i * 65536);
    EXPECT_EQ(r.previous(third[i]), second[i]) << "two steps back, where the second step knew";
    if (second[i] != none) {
      EXPECT_EQ(second[i], i);
    }
  }
  EXPECT_EQ(r.requests(), 1200U);
}

TEST(StepReplay, ARepeatingLayerIsNotTakenForAStep) {
  // 40 requests repeated 50 times: windows recur 40 apart, under
  // min_period, so nothing is ever a counterpart.
  step_replay r;
  const auto layer = step_sizes(40);
  for (int k = 0; k < 50; ++k) {
    for (std::size_t c : run(r, layer, 0x10000000)) ASSERT_EQ(c, none) << "layer " << k;
  }
}

TEST(StepReplay, ARequestTheLastStepLackedOrHadMoreKeepsTheRestAligned) {
  step_replay r;
  const auto sizes = step_sizes(400);
  run(r, sizes, 0x10000000);
  run(r, sizes, 0x20000000);
  // This step makes one extra request at 100 and skips request 200 (as the
  // thread cache serving a request in one step and not the next does).
  std::vector<std::size_t> changed;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i == 100) changed.push_back(123456789);
    if (i != 200) changed.push_back(sizes[i]);
  }
  const auto found = run(r, changed, 0x30000000);
  std::size_t matched = 0;
  for (std::size_t k = 0; k < changed.size(); ++k) {
    if (found[k] == none) continue;
    EXPECT_EQ(r.address(found[k]) % 65536, 0U);
    const std::size_t i = found[k] - 400;  // the request of the second step it repeats
    ASSERT_LT(i, sizes.size());
    EXPECT_EQ(sizes[i], changed[k]) << "a counterpart has the request's size";
    ++matched;
  }
  EXPECT_GE(matched, changed.size() - 4) << "only the changed requests and their neighbours miss";
  EXPECT_EQ(found[101], 100 + 400U) << "request 100 after the extra one still finds its own";
  EXPECT_EQ(found[201], 201 + 400U) << "request 201 skips the missing 200";
}

TEST(StepReplay, ItRealignsAfterASpanThatDiffers) {
  step_replay r;
  const auto sizes = step_sizes(500);
  run(r, sizes, 0x10000000);
  run(r, sizes, 0x20000000);
  // Requests 100-139 of this step are other sizes entirely.
  std::vector<std::size_t> changed = sizes;
  for (std::size_t i = 100; i < 140; ++i) changed[i] = 7777 + i;
  const auto found = run(r, changed, 0x30000000);
  for (std::size_t i = 100; i < 140; ++i) EXPECT_EQ(found[i], none) << i;
  for (std::size_t i = 200; i < 500; ++i) EXPECT_EQ(found[i], 500 + i) << i;
}

TEST(StepReplay, TheHistoryWrapsAround) {
  // More requests than it holds: the counterparts stay one step back.
  step_replay r;
  const auto sizes = step_sizes(1000);
  std::vector<std::size_t> last;
  const std::size_t steps = step_replay::capacity / 1000 + 3;
  for (std::size_t s = 0; s < steps; ++s) last = run(r, sizes, 0x10000000 + s * 0x1000000);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(last[i], (steps - 2) * 1000 + i);
    EXPECT_EQ(r.address(last[i]), 0x10000000 + (steps - 2) * 0x1000000 + i * 65536);
  }
}

TEST(StepReplay, ARepairIsRememberedForTheNextRequestOnly) {
  step_replay r;
  r.reserve();
  r.note_repair();
  r.record(4096, 0x1000, step_replay::none);
  r.record(4096, 0x2000, step_replay::none);
  EXPECT_TRUE(r.repaired(0));
  EXPECT_FALSE(r.repaired(1));
}

TEST(StepReplay, RepeatingNeedsAboutHalfTheRecentRequestsAvailable) {
  step_replay r;
  EXPECT_FALSE(r.repeating());
  for (int i = 0; i < 64; ++i) r.count(true);
  EXPECT_TRUE(r.repeating());
  for (int i = 0; i < 64; ++i) r.count(i % 4 == 0);
  EXPECT_FALSE(r.repeating()) << "a quarter available is no repeat";
}

}  // namespace
}  // namespace strata::testing
