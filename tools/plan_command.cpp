#include "plan_command.hpp"

#include <algorithm>
#include <cstdio>

#include "plan/gpu_presets.hpp"
#include "plan/nvme_rate.hpp"
#include "plan/planner.hpp"
#include "report_file.hpp"
#include "strata/option_table.hpp"

namespace strata {

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "strata plan: %s\n", why.c_str());
  return 1;
}

result<plan::offload_to> offload_of(const char* flag, const std::string& v) {
  if (v == "none") return plan::offload_to::none;
  if (v == "host") return plan::offload_to::host;
  if (v == "nvme") return plan::offload_to::nvme;
  return status{errc::invalid_argument,
                std::string(flag) + " must be none, host or nvme, not '" + v + "'"};
}

// The setup from the command line's words and numbers.
result<plan::plan_setup> setup_of(const plan_command_options& o) {
  plan::plan_setup s = o.setup;
  if (!o.model.empty()) {
    // A preset's shape is the preset's: a shape flag given with it would
    // be silently ignored.
    const plan::model_shape& g = o.shape;
    if (g.layers != 0 || g.hidden != 0 || g.heads != 0 || g.kv_heads != 0 || g.ffn != 0 ||
        g.vocab != 0 || g.tied_embeddings || o.gated_ffn) {
      return status{errc::invalid_argument,
                    "--model " + o.model +
                        " has its own shape: give either --model or the shape flags (--layers, "
                        "--hidden, --heads, --kv-heads, --ffn, --vocab, --tied, --gated), not "
                        "both"};
    }
    auto m = plan::find_model(o.model);
    if (!m) return m.error();
    s.model = *m;
  } else {
    s.model = o.shape;
    s.model.name = "custom";
    s.model.gated_ffn = o.gated_ffn;
    if (s.model.kv_heads == 0) s.model.kv_heads = s.model.heads;
    if (s.model.ffn == 0) s.model.ffn = 4 * s.model.hidden;
    if (s.model.layers == 0 || s.model.hidden == 0) {
      return status{errc::invalid_argument,
                    "give --model (a preset) or the shape: --layers, --hidden, --heads, --vocab"};
    }
  }
  const plan::gpu_preset* gpu = plan::find_gpu_preset(o.gpu);
  if (gpu == nullptr) {
    std::string known;
    for (const plan::gpu_preset& p : plan::gpu_presets()) {
      known += (known.empty() ? "" : ", ") + std::string(p.name);
    }
    return status{errc::invalid_argument, "--gpu " + o.gpu + ": not a GPU the plan knows (" +
                                              known +
                                              "); give --tflops and --hbm-gbps for another"};
  }
  if (!o.tflops_given) s.rates.tflops = gpu->tflops;
  if (!o.hbm_gbps_given) s.rates.hbm_gbps = gpu->hbm_gbps;
  auto memory = parse_byte_size("--gpu-memory", o.gpu_memory);
  if (!memory) return memory.error();
  s.gpu_memory = *memory;
  auto context = parse_byte_size("--context-memory", o.context_memory);
  if (!context) return context.error();
  s.context_memory = *context;
  if (o.dtype == "bf16") {
    s.dtype = plan::precision::bf16_mixed;
  } else if (o.dtype == "fp32") {
    s.dtype = plan::precision::fp32;
  } else if (o.dtype == "amp") {
    s.dtype = plan::precision::amp;
  } else {
    return status{errc::invalid_argument,
                  "--dtype must be bf16, fp32 or amp, not '" + o.dtype + "'"};
  }
  auto opt = offload_of("--offload-optimizer", o.offload_optimizer);
  if (!opt) return opt.error();
  s.optimizer = *opt;
  auto params = offload_of("--offload-params", o.offload_params);
  if (!params) return params.error();
  s.params = *params;
  s.flash_attention = !o.eager_attention;
  if (o.allocator == "all") {
    s.allocator = plan::allocator_kind::all;
  } else if (o.allocator == "strata") {
    s.allocator = plan::allocator_kind::strata;
  } else if (o.allocator == "pytorch") {
    s.allocator = plan::allocator_kind::pytorch;
  } else if (o.allocator == "expandable") {
    s.allocator = plan::allocator_kind::expandable;
  } else {
    return status{errc::invalid_argument,
                  "--allocator must be all, strata, pytorch or "
                  "expandable, not '" +
                      o.allocator + "'"};
  }
  if (s.lora_mlp && s.lora_rank == 0) {
    return status{errc::invalid_argument, "--lora-mlp needs --lora (a LoRA rank)"};
  }
  if (o.json_out == "-" && o.html_out == "-") {
    return status{errc::invalid_argument,
                  "--json - and --html - would both write to stdout: give one of them a file"};
  }
  if (auto c = plan::check_setup(s); !c) return c;
  return s;
}

bool write_out(const std::string& path, const std::string& text) {
  if (path != "-") return write_report("plan", path, text);
  std::fputs(text.c_str(), stdout);
  return true;
}

}  // namespace

int run_plan(const plan_command_options& o) {
  auto s = setup_of(o);
  if (!s) return fail(s.error().message());
  if (!o.nvme_dir.empty() && !o.nvme_gbps_given) {
    auto rates = plan::measure_nvme(o.nvme_dir);
    if (!rates) return fail(rates.error().message());
    s->rates.nvme_gbps = std::min(rates->write_gbps, rates->read_gbps);
    if (o.json_out != "-") {
      std::printf(
          "NVMe measured in %s: write %.2f GB/s, read %.2f GB/s; the plan uses %.2f GB/s.\n\n",
          o.nvme_dir.c_str(), rates->write_gbps, rates->read_gbps, s->rates.nvme_gbps);
    }
  }
  plan::plan_result p;
  if (o.search) {
    auto found = plan::largest_batch(*s);
    if (!found) return fail(found.error().message());
    if (found->micro_batch == 0) {
      s->micro_batch = 1;
      auto one = plan::make_plan(*s);
      if (!one) return fail(one.error().message());
      p = std::move(*one);
      if (o.json_out != "-") std::printf("--search: not even micro-batch 1 fits.\n\n");
    } else {
      p = std::move(found->plan);
      if (o.json_out != "-") {
        std::printf("--search: the largest micro-batch that fits is %llu.\n\n",
                    static_cast<unsigned long long>(found->micro_batch));
      }
    }
  } else {
    auto made = plan::make_plan(*s);
    if (!made) return fail(made.error().message());
    p = std::move(*made);
  }
  std::vector<plan::fix> fixes;
  if (!plan::plan_fits(p)) {
    auto f = plan::find_fixes(p.setup);
    if (!f) return fail(f.error().message());
    fixes = std::move(*f);
  }
  if (o.json_out != "-") std::fputs(plan::plan_text(p, fixes).c_str(), stdout);
  if (!o.json_out.empty() && !write_out(o.json_out, plan::plan_json(p, fixes))) return 1;
  if (!o.html_out.empty() && !write_out(o.html_out, plan::plan_html(p, fixes))) return 1;
  return plan::plan_fits(p) ? 0 : 2;
}

}  // namespace strata
