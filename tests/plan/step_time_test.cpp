// The plan's step time, run on N timing-only GPUs with the local
// communicator: each figure is checked against what the schedule implies,
// worked out here by hand from the model's sizes and the rates (the ring
// times of docs/plan.md, "Step time").
#include <gtest/gtest.h>

#include "plan/memory_traffic.hpp"
#include "plan/step_ranks.hpp"
#include "plan/step_time.hpp"

namespace strata::plan {
namespace {

// 4 layers of hidden 1024 (12.6 M parameters each) and a 32000-word
// vocabulary (32.8 M in the embeddings): small enough to reason about.
plan_setup small_job(std::uint64_t gpus) {
  plan_setup s;
  s.model = {.name = "small",
             .layers = 4,
             .hidden = 1024,
             .heads = 16,
             .kv_heads = 16,
             .ffn = 4096,
             .vocab = 32000,
             .gated_ffn = false};
  s.gpus = gpus;
  s.micro_batch = 4;
  s.seq = 2048;
  s.rates.driver_costs = false;  // the arithmetic below has no driver calls in it
  // Nor memory-bound kernels (instant at rate 0): matmuls and links only,
  // but in PlanStepTime.MemoryBoundKernelsTakeTheirBytesAtTheMemoryRate.
  s.rates.hbm_gbps = 0;
  return s;
}

double tokens(const plan_setup& s) {
  return static_cast<double>(s.micro_batch * s.seq);
}

// One layer's forward FLOPs: its matrices' 2 P T and attention's 4 b s^2 h.
double layer_forward(const plan_setup& s) {
  return 2.0 * static_cast<double>(layer_params(s.model)) * tokens(s) +
         4.0 * static_cast<double>(s.micro_batch * s.seq * s.seq * s.model.hidden);
}

double flop_seconds(const plan_setup& s, double flops) {
  return flops / (s.rates.tflops * 1e12);
}

double bus(const plan_setup& s) {
  return s.rates.nvlink_gbps * 1e9;
}

// Elements of one of 8 ranks' shards of `params`, rounded up.
double shard8(std::uint64_t params) {
  const std::uint64_t elements = (params + 7) / 8;
  return static_cast<double>(elements);
}

step_time simulate(const plan_setup& s) {
  auto t = simulate_step_time(s);
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return t.ok() ? *t : step_time{};
}

TEST(PlanStepTime, OneGpuTakesItsFlopsAtTheComputeRate) {
  plan_setup s = small_job(1);
  const double forward =
      4 * layer_forward(s) + 2.0 * static_cast<double>(outer_params(s.model)) * tokens(s);
  step_time t = simulate(s);
  EXPECT_NEAR(t.compute, flop_seconds(s, 3 * forward), 1e-12) << "forward and twice it back";
  EXPECT_EQ(t.exposed_collectives, 0.0);
  EXPECT_EQ(t.collectives, 0.0);
  EXPECT_EQ(t.total(), t.compute);

  s.checkpointing = true;  // the layers' forward once more
  EXPECT_NEAR(simulate(s).compute, flop_seconds(s, 3 * forward + 4 * layer_forward(s)), 1e-12);
  s.checkpointing = false;
  s.grad_accum = 3;
  EXPECT_NEAR(simulate(s).compute, flop_seconds(s, 9 * forward), 1e-12);
  s.grad_accum = 1;
  s.dtype = precision::fp32;  // at 1/8 of the bf16 rate
  EXPECT_NEAR(simulate(s).compute, 8 * flop_seconds(s, 3 * forward), 1e-12);
}

// The memory-bound kernels (memory_traffic.hpp) after each unit's
// matmuls: a layer's traffic forward, twice it backward (and once more
// recomputed when checkpointed), the head's likewise, then Adam's over
// every trainable parameter once a step.
TEST(PlanStepTime, MemoryBoundKernelsTakeTheirBytesAtTheMemoryRate) {
  plan_setup s = small_job(1);
  s.rates.hbm_gbps = 1000;
  const memory_traffic m = memory_traffic_of(s);
  ASSERT_GT(m.layer, 0);
  ASSERT_GT(m.head, 0);
  const double flops =
      3 * (4 * layer_forward(s) + 2.0 * static_cast<double>(outer_params(s.model)) * tokens(s));
  const double adam = m.optimizer_per_param * static_cast<double>(trainable_params(s));
  const double bytes = (1 + backward_traffic) * (4 * m.layer + m.head) + adam;
  EXPECT_NEAR(simulate(s).compute, flop_seconds(s, flops) + bytes / 1e12, 1e-12);
  s.checkpointing = true;  // no key/value cache: a checkpointed layer moves less
  const memory_traffic c = memory_traffic_of(s);
  const double recomputed = (1 + backward_traffic) * (4 * c.layer + c.head) + adam + 4 * c.layer;
  EXPECT_NEAR(simulate(s).compute,
              flop_seconds(s, flops + 4 * layer_forward(s)) + recomputed / 1e12, 1e-12);
  s.checkpointing = false;
  s.grad_accum = 2;  // Adam once a step
  EXPECT_NEAR(simulate(s).compute, flop_seconds(s, 2 * flops) + (2 * bytes - adam) / 1e12, 1e-12);
}

// DDP, through Strata's gradient buckets: each unit's gradients (25 MB
// and more: a bucket each) are all-reduced while the layer before it
// computes its backward, so only the last (layer 0's) is exposed. The
// buckets' first step also exchanges rank 0's ready order: a few bytes,
// under 10 ns at this rate (the tolerance).
TEST(PlanStepTime, DdpHidesEveryAllReduceButTheLast) {
  const plan_setup s = small_job(8);
  const double ring = 2.0 * 7 / 8 * 2;  // all-reduce: 2 (n - 1) / n of the bf16 bytes
  const step_time t = simulate(s);
  EXPECT_NEAR(t.collectives, ring * static_cast<double>(total_params(s.model)) / bus(s), 1e-8);
  EXPECT_NEAR(t.exposed_collectives, ring * static_cast<double>(layer_params(s.model)) / bus(s),
              1e-8);
  EXPECT_NEAR(t.total(), simulate(small_job(1)).compute + t.exposed_collectives, 1e-12);
}

// DDP with 6 MiB layers: the gradient buckets hold four layers each (25
// MiB), so the last bucket's four layers are exposed, not one layer.
TEST(PlanStepTime, DdpExposesTheLastBucketOfSeveralLayers) {
  plan_setup s = small_job(8);
  s.model.layers = 12;
  s.model.hidden = 512;
  s.model.heads = 8;
  s.model.kv_heads = 8;
  s.model.ffn = 2048;
  ASSERT_EQ(layer_params(s.model) * 2, 6293504U) << "6.0 MiB of bf16 gradients a layer";
  const double ring = 2.0 * 7 / 8 * 2;
  EXPECT_NEAR(simulate(s).exposed_collectives,
              ring * 4 * static_cast<double>(layer_params(s.model)) / bus(s), 1e-8);
}

// Across nodes at 0.5 GB/s the all-reduces outlast backward: they run back
// to back from the head's, and only the layers' backward hides them (the
// ready order's exchange: under 100 ns at this rate).
TEST(PlanStepTime, SlowLinksAreExposedByWhatBackwardCannotHide) {
  plan_setup s = small_job(16);
  s.nodes = 2;
  s.rates.network_gbps = 0.5;
  const step_time t = simulate(s);
  const double all_reduces =
      2.0 * 15 / 16 * 2 * static_cast<double>(total_params(s.model)) / (0.5e9);
  EXPECT_NEAR(t.collectives, all_reduces, 1e-7);
  EXPECT_NEAR(t.exposed_collectives, all_reduces - flop_seconds(s, 4 * 2 * layer_forward(s)), 1e-7);
}

// ZeRO-3, through Strata's residency manager and prefetcher: begin_step
// gathers the first unit, and each acquire gathers the next unit ahead.
// The host runs ahead of the streams (the device has room, so no
// allocation waits), so the gathers run back to back on the communication
// stream, well ahead of the compute: only the first gather is exposed, and
// the last reduce-scatter (layer 0's). The head's full buffer is kept at
// the turn from forward to backward (needed again at once): it is
// gathered once, the layers twice.
TEST(PlanStepTime, Zero3ExposesTheFirstGatherAndTheLastReduceScatter) {
  plan_setup s = small_job(8);
  s.zero = 3;
  const step_time t = simulate(s);
  const double ring = 7 * shard8(layer_params(s.model)) * 2 / bus(s);
  const double outer = 7 * shard8(outer_params(s.model)) * 2 / bus(s);
  EXPECT_NEAR(t.exposed_collectives, 2 * ring, 1e-12);
  const double gathers = 2 * 4 * ring + outer;
  const double scatters = 4 * ring + outer;
  EXPECT_NEAR(t.collectives, gathers + scatters, 1e-12);
  EXPECT_EQ(t.params.gathers, 9U);
  EXPECT_EQ(t.params.gathers_ahead, 9U) << "every gather went out before its acquire";
  EXPECT_EQ(t.params.gathers_reused, 1U);
}

// ZeRO-2 with Adam on the host: the gradients go down as their reductions
// finish (hidden but for layer 0's), the step waits for CPU Adam and for
// the parameters' way back up.
TEST(PlanStepTime, TheHostOptimizerStepIsWaitedFor) {
  plan_setup s = small_job(8);
  s.zero = 2;
  s.optimizer = offload_to::host;
  const step_time t = simulate(s);
  const double pcie = s.rates.pcie_gbps * 1e9;
  const double layer_part = shard8(layer_params(s.model)) * 2 / pcie;
  const double outer_part = shard8(outer_params(s.model)) * 2 / pcie;
  const double adam = static_cast<double>(total_params(s.model)) / 8 * 8 /
                      (s.rates.host_adam_gparams * 1e9);  // a node's 8 GPUs' parts
  const double up = 4 * layer_part + outer_part;
  EXPECT_NEAR(t.transfers, 2 * up + adam, 1e-12);
  EXPECT_NEAR(t.exposed_transfers, layer_part + adam + up, 1e-12);
}

// Hybrid shard: ZeRO-3 within each node, then the shards' replicas
// all-reduced across nodes, after backward: all of it exposed.
TEST(PlanStepTime, HybridShardAllReducesTheShardsAcrossNodes) {
  plan_setup s = small_job(16);
  s.nodes = 2;
  s.zero = 3;
  const step_time within = simulate(s);
  s.hybrid_shard = true;
  const step_time hybrid = simulate(s);
  double replicas = 0;  // each unit's shard of 8, all-reduced by 2 replicas
  for (std::uint64_t p : {layer_params(s.model), layer_params(s.model), layer_params(s.model),
                          layer_params(s.model), outer_params(s.model)}) {
    replicas += 2.0 * 1 / 2 * shard8(p) * 2 / (s.rates.network_gbps * 1e9);
  }
  EXPECT_GE(hybrid.exposed_collectives, replicas);
  EXPECT_LT(hybrid.total(), within.total()) << "NVLink within the node beats the network";
}

// ZeRO-3's offloaded parameters on a device with only the room they need:
// 12 layers (a 1000-word vocabulary, so that the layers are the largest
// units), so that every rank's shards (12 of 4 MiB pages) and one gathered
// layer (26 MiB) pass the room (two shards, two full buffers: 62 MiB)
// however tightly the allocator packs them.
plan_setup offload_job() {
  plan_setup s = small_job(8);
  s.model.layers = 12;
  s.model.vocab = 1000;
  s.zero = 3;
  return s;
}

// Every rank's shards in bf16 bytes.
double shard_bytes(const plan_setup& s) {
  return 2.0 * (static_cast<double>(s.model.layers) * shard8(layer_params(s.model)) +
                shard8(outer_params(s.model)));
}

// ZeRO-3 with parameters offloaded to host memory, through the residency
// manager and the prefetcher (offload_job). With room on the device the
// shards stay cached after their first fill: the steady step moves
// nothing. With only the room the parameters need, shards are spilled for
// the gathers and filled again, at most every shard twice (forward and
// backward), and the step is slower: gathers wait for full buffers to be
// freed. On NVMe (the manager's modeled NVMe tier, through a host tier of
// three shards) the same: nothing moves with room; with none, shards are
// read back (never written: their extents stay), one read at a time at
// the rank's share of the node's rate, and the step, which ends when the
// reads it issued have, is slower than from host memory.
TEST(PlanStepTime, OffloadedParametersAreFetchedWhenTheDeviceHasNoRoomForThem) {
  plan_setup s = offload_job();
  s.params = offload_to::host;
  const double shards = shard_bytes(s);
  const double pcie = s.rates.pcie_gbps * 1e9;
  const step_time roomy = simulate(s);
  EXPECT_EQ(roomy.transfers, 0.0);
  EXPECT_EQ(roomy.params.bytes_from_host, 0U);
  auto tight = simulate_step_time(s, 0);
  ASSERT_TRUE(tight.ok()) << tight.error().to_string();
  const auto filled = static_cast<double>(tight->params.bytes_from_host);
  EXPECT_GT(filled, 0.0);
  EXPECT_LE(filled, 2 * shards);
  // The transfers-only run spills what its own schedule makes it spill
  // (frees come sooner with no compute timed): some fills, every shard at
  // most twice, each at the PCIe rate.
  EXPECT_GT(tight->transfers, 0.0);
  EXPECT_LE(tight->transfers, 2 * shards / pcie);
  EXPECT_GT(tight->total(), roomy.total()) << "with no room the gathers wait for memory";
  s.params = offload_to::nvme;
  EXPECT_EQ(simulate(s).transfers, 0.0) << "cached on the device, as in host memory";
  auto nvme = simulate_step_time(s, 0);
  ASSERT_TRUE(nvme.ok()) << nvme.error().to_string();
  const auto read = static_cast<double>(nvme->params.bytes_from_nvme);
  EXPECT_GT(read, 0.0);
  EXPECT_LE(read, 2 * shards);
  EXPECT_EQ(nvme->params.bytes_to_nvme, 0U) << "unwritten shards keep their extents";
  const double rank_nvme = s.rates.nvme_gbps / 8 * 1e9;  // the node's 8 GPUs share it
  EXPECT_GE(nvme->transfers, read / rank_nvme) << "one read at a time on the rank's share";
  EXPECT_GT(nvme->total(), tight->total()) << "NVMe is slower than host memory";
}

// With the optimizer on the host too, each step's update writes every
// shard through the manager (filled first if spilled): with no room on the
// device, the updated shards are written back to NVMe, each write read
// back (nvme_verify), at most once a step, one request at a time at the
// rank's share of the disk.
TEST(PlanStepTime, UpdatedShardsGoBackToNvmeWhenTheDeviceHasNoRoomForThem) {
  plan_setup s = offload_job();
  s.params = offload_to::nvme;
  s.optimizer = offload_to::host;
  const double shards = shard_bytes(s);
  auto t = simulate_step_time(s, 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  const auto written = static_cast<double>(t->params.bytes_to_nvme);
  const auto read = static_cast<double>(t->params.bytes_from_nvme);
  EXPECT_GT(written, 0.0);
  EXPECT_LE(written, shards) << "each shard is updated, so written, once a step";
  const double rank_nvme = s.rates.nvme_gbps / 8 * 1e9;
  EXPECT_GE(t->transfers, (read + 2 * written) / rank_nvme) << "reads, writes and read-backs";
}

// Past default_simulated_ranks (one), a few ranks stand for the job, their
// groups modeled at full size: the step takes the same time as with every
// rank simulated, and as with four.
TEST(PlanStepTime, AFewSimulatedRanksStandForTheJob) {
  plan_setup zero3 = small_job(16);
  zero3.zero = 3;
  plan_setup hybrid = small_job(32);
  hybrid.zero = 3;
  hybrid.nodes = 2;
  hybrid.hybrid_shard = true;
  plan_setup ddp = small_job(12);
  ddp.zero = 0;
  for (const plan_setup& s : {zero3, hybrid, ddp}) {
    auto all = run_step_ranks(s, {}, ~std::uint64_t{0}, s.gpus);
    ASSERT_TRUE(all.ok()) << all.error().to_string();
    for (const std::size_t simulated : {default_simulated_ranks, std::size_t{4}}) {
      auto few = run_step_ranks(s, {}, ~std::uint64_t{0}, simulated);
      ASSERT_TRUE(few.ok()) << few.error().to_string();
      EXPECT_GT(few->seconds, 0.0);
      EXPECT_NEAR(few->seconds, all->seconds, 1e-9 * all->seconds)
          << s.gpus << " GPUs, " << simulated << " simulated";
      EXPECT_EQ(few->params.gathers, all->params.gathers);
      EXPECT_EQ(few->conf, all->conf);
    }
  }
}

TEST(PlanStepTime, OnlyTheTimedPartsTakeTime) {
  plan_setup s = small_job(8);
  s.zero = 3;
  s.params = offload_to::nvme;
  s.optimizer = offload_to::nvme;
  auto none = run_step_ranks(s, {false, false, false});
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  EXPECT_EQ(none->seconds, 0.0);
  auto all = run_step_ranks(s, {});
  ASSERT_TRUE(all.ok());
  EXPECT_GT(all->seconds, 0.0);
}

// A step of more micro-batches than the simulation runs (12) adds, for
// each further one, what the twelfth added to eleven: past the first few,
// every micro-batch but the last repeats the one before, so the figures
// are those of running all of them (here 14, under DDP and under ZeRO-3
// with offloaded parameters). Qwen2.5-1.5B's ZeRO-3 step settles late (on
// 4 GPUs at 2048 tokens a micro-batch adds 74, 59 and 98 ms as the sixth
// to eighth, 107 ms from the ninth on); here, extrapolated from the
// fourth, it came out over twice as long.
TEST(PlanStepTime, MicroBatchesPastTheTwelfthAddWhatTheTwelfthAdded) {
  for (const int zero : {0, 30}) {
    plan_setup s = small_job(2);
    s.zero = zero == 30 ? 3 : zero;
    if (zero >= 3) s.params = offload_to::host;
    s.grad_accum = 14;
    if (zero == 30) {
      auto qwen = find_model("qwen2.5-1.5b");
      ASSERT_TRUE(qwen.ok());
      s = plan_setup{};
      s.model = *qwen;
      s.gpus = 2;
      s.zero = 3;
      s.params = offload_to::host;
      s.seq = 1024;
      s.grad_accum = 14;
    }
    auto all = run_step_ranks(s, {});
    ASSERT_TRUE(all.ok()) << all.error().to_string();
    auto planned = simulate_step_time(s);
    ASSERT_TRUE(planned.ok()) << planned.error().to_string();
    EXPECT_NEAR(planned->total(), all->seconds, 0.002 * all->seconds) << "case " << zero;
    if (zero >= 3) {
      EXPECT_EQ(planned->params.gathers, all->params.gathers);
      EXPECT_EQ(planned->params.bytes_from_host, all->params.bytes_from_host);
    }
  }
}

}  // namespace
}  // namespace strata::plan
