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

// A training step at sequence length `seq`, as dynamic padding changes it:
// per layer five activations (7, 11, 13, 17 and 19 x 2 KiB a token, at
// least 7 MiB at 512 tokens: no two equal at the lengths used below), an
// fp32 and a bf16 block (32 and 16 KiB a token: the fp32 block of a
// 512-token step has the bf16 block's size of a 1024-token one) and a
// weight's gradient of fixed size; then the optimizer's temporaries, of
// fixed sizes, which realign every step.
std::vector<std::size_t> shaped_step(std::size_t seq) {
  constexpr std::size_t kib = 1024;
  constexpr std::size_t mib = kib * kib;
  std::vector<std::size_t> sizes;
  for (std::size_t layer = 0; layer < 40; ++layer) {
    for (std::size_t f : {7, 11}) sizes.push_back(f * 2 * kib * seq);
    sizes.push_back(32 * kib * seq);
    sizes.push_back(16 * kib * seq);
    for (std::size_t f : {13, 17, 19}) sizes.push_back(f * 2 * kib * seq);
    sizes.push_back((3 + layer % 5) * mib);
  }
  for (std::size_t k = 0; k < 48; ++k) sizes.push_back((1 + k) * mib + 4 * kib * k);
  return sizes;
}

TEST(StepReplay, AStepWhoseShapesChangedRepeatsTheRequestsInTheirPlaces) {
  step_replay r;
  std::uintptr_t base = 0x10000000;
  for (int k = 0; k < 3; ++k, base += 0x10000000) run(r, shaped_step(1024), base);
  const std::size_t n = shaped_step(1024).size();
  const auto in_place = [&](std::size_t found, std::size_t i) {
    return found != none && r.address(found) == base - 0x10000000 + i * 65536;
  };
  // The first step at another length: its first two requests miss (no
  // size like theirs), then each repeats the one in its place, the fp32
  // block too, though a bf16 block of its size is one request on.
  const auto first = run(r, shaped_step(512), base);
  EXPECT_EQ(first[0], none);
  EXPECT_EQ(first[1], none);
  for (std::size_t i = step_replay::resized_after; i < n; ++i) {
    EXPECT_TRUE(in_place(first[i], i)) << "request " << i;
  }
  // Every later step, whatever its length, from its first request.
  for (std::size_t seq : {768, 896, 640, 1024, 512}) {
    base += 0x10000000;
    const auto found = run(r, shaped_step(seq), base);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(in_place(found[i], i)) << seq << " tokens, request " << i;
    }
  }
}

TEST(StepReplay, SizesFarApartOrSmallAreNotTheSameRequest) {
  step_replay r;
  for (int k = 0; k < 3; ++k) run(r, shaped_step(1024), 0x10000000 + k * 0x10000000);
  // Eight times the length: every activation is 8 x the one in its place.
  const auto longer = run(r, shaped_step(8192), 0x40000000);
  for (std::size_t i = 0; i < longer.size(); ++i) {
    if (i % 8 != 7 && i < 320) {
      EXPECT_EQ(longer[i], none) << i;
    }
  }
  // Small requests that changed size: misses, as before.
  step_replay s;
  const auto sizes = step_sizes(400);
  run(s, sizes, 0x10000000);
  run(s, sizes, 0x20000000);
  std::vector<std::size_t> halved = sizes;
  for (std::size_t& z : halved) z = z < (std::size_t{4} << 20) ? z / 2 + 512 : z;
  const auto found = run(s, halved, 0x30000000);
  for (std::size_t i = 0; i < halved.size(); ++i) {
    if (halved[i] != sizes[i]) {
      EXPECT_EQ(found[i], none) << i;
    }
  }
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
