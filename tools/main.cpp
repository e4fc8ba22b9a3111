// The `strata` command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "demo_command.hpp"
#include "plan_command.hpp"
#include "replay_command.hpp"

namespace {

// A count: CLI11 would read "-1" into an unsigned option as 2^64 - 1.
const CLI::Validator counts(
    [](std::string& text) {
      return text.find('-') != std::string::npos ? "must be a count, not negative: " + text
                                                 : std::string();
    },
    "COUNT");

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"strata: a caching GPU memory allocator with offload tiers"};
  app.set_version_flag("--version", STRATA_VERSION);
  app.require_subcommand(1);

  std::string spec = "sim:capacity=80GiB";
  auto* demo = app.add_subcommand(
      "demo",
      "Exercise a device (reserve, map, alias, streams, events, copies) and print each step");
  demo->add_option("--device", spec, "Device spec: sim[:key=value,...], cuda[:N] or auto")
      ->capture_default_str();

  strata::replay_command_options ro;
  auto* replay = app.add_subcommand(
      "replay", "Replay an allocation trace on Strata and report its memory use (docs/replay.md)");
  replay
      ->add_option("trace", ro.trace,
                   "PyTorch memory snapshot (.pickle), Strata trace JSON, RMM log CSV or "
                   "id,lower,upper,size CSV")
      ->required();
  replay->add_option("--device", ro.device, "Device spec: sim[:key=value,...], cuda[:N] or auto")
      ->capture_default_str();
  replay->add_option("--conf", ro.conf, "STRATA_CONF options (docs/configuration.md)");
  replay->add_option("--device-index", ro.device_index, "Which device trace of a PyTorch snapshot")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  replay->add_option("--json", ro.json_out, "Write the report as JSON to this file");
  replay->add_option("--html", ro.html_out, "Write the report as a self-contained HTML page");
  replay->add_option("--snapshot", ro.snapshot_out,
                     "Write the replay's allocator state and event trace as a PyTorch memory "
                     "snapshot pickle");
  replay->add_flag("--quiet", ro.quiet, "Print nothing but errors and warnings");
  replay->add_flag("--timeline", ro.timeline,
                   "Replay at the trace's recorded pace on a timing-only sim device with the GPU "
                   "behind the host, and say what the allocator added (docs/replay.md)");
  replay
      ->add_option("--gpu-lag-ms", ro.gpu_lag_ms,
                   "With --timeline: how far the GPU runs behind the host when the trace has no "
                   "kernels (default 12, measured on an H100)")
      ->check(CLI::Range(0.0, 10000.0));
  replay
      ->add_option("--warmup", ro.warmup,
                   "Replay the trace this many times before the measured pass (a trace recorded "
                   "warm, like a profiler trace of later steps, then replays warm; default 0, "
                   "but 1 with --timeline for a trace whose recording held half its peak "
                   "reserve at its start)")
      ->check(CLI::Range(0, 16));
  replay
      ->add_option("--steady-steps", ro.steady_steps,
                   "With --timeline: repeat the trace's last step this many times after it and "
                   "say what the last half of them added (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  replay->add_flag("--one-thread", ro.one_thread,
                   "Issue every call from one thread (by default a PyTorch snapshot's calls "
                   "that have no Python frames, its autograd thread's, come from a second "
                   "thread, as in training)");

  strata::plan_command_options po;
  auto* plan = app.add_subcommand(
      "plan",
      "Will a training job fit: run its step's allocations through Strata on simulated GPUs of "
      "your size and estimate the step (docs/plan.md)");
  plan->add_option("--model", po.model, "A preset: llama2-7b, qwen2.5-7b, chatglm3-6b, gpt2, ...");
  plan->add_option("--layers", po.shape.layers, "Custom shape: transformer layers")->check(counts);
  plan->add_option("--hidden", po.shape.hidden, "Custom shape: hidden size")->check(counts);
  plan->add_option("--heads", po.shape.heads, "Custom shape: attention heads")->check(counts);
  plan->add_option("--kv-heads", po.shape.kv_heads, "Custom shape: K/V heads (default: --heads)")
      ->check(counts);
  plan->add_option("--ffn", po.shape.ffn, "Custom shape: FFN size (default: 4 x hidden)")
      ->check(counts);
  plan->add_option("--vocab", po.shape.vocab, "Custom shape: vocabulary")->check(counts);
  plan->add_flag("--tied", po.shape.tied_embeddings, "Custom shape: the LM head is the embedding");
  plan->add_flag("--gated", po.gated_ffn,
                 "Custom shape: a SwiGLU FFN (gate, up, down) instead of GPT-2's two matrices");
  plan->add_option("--gpus", po.setup.gpus, "GPUs in all")->capture_default_str()->check(counts);
  plan->add_option("--nodes", po.setup.nodes, "Nodes (dividing --gpus)")
      ->capture_default_str()
      ->check(counts);
  plan->add_option("--gpu-memory", po.gpu_memory, "Each GPU's memory")->capture_default_str();
  plan->add_option("--context-memory", po.context_memory,
                   "Taken by the CUDA context and workspaces before the first tensor")
      ->capture_default_str();
  plan->add_option("--zero", po.setup.zero, "ZeRO stage: 0 (DDP), 1, 2, 3 (FSDP full shard)")
      ->capture_default_str();
  plan->add_flag("--hybrid-shard", po.setup.hybrid_shard,
                 "FSDP hybrid shard: ZeRO-3 within a node, replicated across nodes");
  plan->add_option("--batch", po.setup.micro_batch, "Micro-batch per GPU")
      ->capture_default_str()
      ->check(counts);
  plan->add_option("--seq", po.setup.seq, "Sequence length in tokens")
      ->capture_default_str()
      ->check(counts);
  plan->add_option("--grad-accum", po.setup.grad_accum, "Gradient accumulation steps")
      ->capture_default_str()
      ->check(counts);
  plan->add_option("--dtype", po.dtype,
                   "bf16 (mixed, fp32 master), fp32, or amp (fp32 weights, bf16 autocast)")
      ->capture_default_str();
  plan->add_option("--lora", po.setup.lora_rank, "LoRA rank (0: full fine-tuning)")
      ->capture_default_str()
      ->check(counts);
  plan->add_flag("--lora-mlp", po.setup.lora_mlp, "LoRA on the MLP too (default: attention)");
  plan->add_flag("--checkpointing", po.setup.checkpointing, "Activation checkpointing per layer");
  plan->add_flag("--eager-attention", po.eager_attention,
                 "Keep the s x s attention scores (default: flash attention)");
  plan->add_option("--offload-optimizer", po.offload_optimizer, "none, host or nvme")
      ->capture_default_str();
  plan->add_option("--offload-params", po.offload_params, "none, host or nvme (ZeRO-3)")
      ->capture_default_str();
  plan->add_option("--allocator", po.allocator,
                   "Whose reserve decides whether it fits: all (Strata's, with PyTorch's default "
                   "and expandable segments beside it), strata, pytorch or expandable")
      ->capture_default_str();
  plan->add_option("--gpu", po.gpu,
                   "The GPU whose achieved rates time the step: h100 (docs/plan.md)")
      ->capture_default_str();
  auto* tflops = plan->add_option("--tflops", po.setup.rates.tflops,
                                  "Achieved TFLOP/s per GPU of matmuls and attention (bf16; "
                                  "default: --gpu's)");
  auto* hbm_gbps = plan->add_option("--hbm-gbps", po.setup.rates.hbm_gbps,
                                    "Achieved GB/s of the memory-bound kernels per GPU "
                                    "(default: --gpu's)");
  plan->add_option("--nvlink-gbps", po.setup.rates.nvlink_gbps,
                   "Collective bus bandwidth within a node, GB/s")
      ->capture_default_str();
  plan->add_option("--network-gbps", po.setup.rates.network_gbps,
                   "Collective bus bandwidth across nodes, GB/s")
      ->capture_default_str();
  plan->add_option("--pcie-gbps", po.setup.rates.pcie_gbps, "Host <-> GPU, GB/s")
      ->capture_default_str();
  auto* nvme_gbps = plan->add_option("--nvme-gbps", po.setup.rates.nvme_gbps, "NVMe per node, GB/s")
                        ->capture_default_str();
  plan->add_option("--nvme-dir", po.nvme_dir,
                   "Measure the NVMe rate in this directory (256 MiB written and read with "
                   "O_DIRECT) unless --nvme-gbps is given");
  plan->add_flag("--search", po.search, "Find the largest micro-batch that fits");
  plan->add_option("--json", po.json_out, "Write the plan as JSON to this file ('-': stdout)");
  plan->add_option("--html", po.html_out, "Write the plan as a self-contained HTML page");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 1, as documented.
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (*demo) return strata::run_demo(spec);
  if (*replay) return strata::run_replay(ro);
  po.nvme_gbps_given = nvme_gbps->count() > 0;
  po.tflops_given = tflops->count() > 0;
  po.hbm_gbps_given = hbm_gbps->count() > 0;
  if (*plan) return strata::run_plan(po);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strata: %s\n", e.what());
  return 1;
}
