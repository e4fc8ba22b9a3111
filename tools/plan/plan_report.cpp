// The plan's report: text for people, JSON for programs.
#include <cstdio>
#include <string>

#include "plan/planner.hpp"
#include "strata/json_string.hpp"
#include "strata/option_table.hpp"

namespace strata::plan {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string seconds(double s) {
  return s < 1 ? fmt("%.0f ms", s * 1e3) : fmt("%.2f s", s);
}

// One JSON object, its members in the order added.
class json_object {
 public:
  json_object& raw(std::string_view key, const std::string& value) {
    body_ += (body_.empty() ? "" : ",") + json_string(key) + ":" + value;
    return *this;
  }
  json_object& num(std::string_view key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  json_object& dbl(std::string_view key, double v) { return raw(key, fmt("%.6g", v)); }
  json_object& str(std::string_view key, std::string_view v) { return raw(key, json_string(v)); }
  [[nodiscard]] std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

const char* allocator_name(allocator_kind a) {
  switch (a) {
    case allocator_kind::strata:
      return "strata";
    case allocator_kind::pytorch:
      return "pytorch";
    case allocator_kind::expandable:
      return "expandable";
    case allocator_kind::all:
      break;
  }
  return "all";
}

const char* offload_name(offload_to o) {
  return o == offload_to::none ? "none" : (o == offload_to::host ? "host" : "nvme");
}

std::string setup_line(const plan_setup& s) {
  std::string zero = s.zero == 0 ? "DDP" : "ZeRO-" + std::to_string(s.zero);
  if (s.hybrid_shard) zero += " (hybrid shard)";
  std::string line = std::to_string(s.gpus) + " GPU" + (s.gpus > 1 ? "s" : "") + " x " +
                     format_bytes(s.gpu_memory) + " (" + std::to_string(s.nodes) + " node" +
                     (s.nodes > 1 ? "s" : "") + "), " + zero + ", micro-batch " +
                     std::to_string(s.micro_batch) + " x " + std::to_string(s.seq) + " tokens";
  if (s.grad_accum > 1) line += " x " + std::to_string(s.grad_accum) + " accumulation steps";
  line += s.checkpointing ? ", checkpointing" : ", no checkpointing";
  line += s.flash_attention ? ", flash attention" : ", eager attention";
  if (s.optimizer != offload_to::none)
    line += std::string(", optimizer state on ") + offload_name(s.optimizer);
  if (s.params != offload_to::none)
    line += std::string(", parameters on ") + offload_name(s.params);
  return line;
}

std::string model_line(const plan_setup& s) {
  const auto billions = static_cast<double>(total_params(s.model)) / 1e9;
  std::string line = s.model.name + " (" + fmt("%.2f", billions) + " B parameters), ";
  line += s.dtype == precision::fp32  ? "fp32"
          : s.dtype == precision::amp ? "fp32 weights, bf16 autocast (amp)"
                                      : "bf16 with fp32 master weights";
  if (s.lora_rank > 0) {
    line += ", LoRA rank " + std::to_string(s.lora_rank) + " on " +
            (s.lora_mlp ? "attention and MLP" : "attention") + " (" +
            fmt("%.1f", static_cast<double>(trainable_params(s)) / 1e6) + " M trainable)";
  }
  return line;
}

// PyTorch's allocator by name, as the report calls it.
const char* pytorch_name(allocator_kind a) {
  return a == allocator_kind::pytorch ? "PyTorch's default allocator"
                                      : "PyTorch's allocator with expandable segments";
}

std::string verdict(const plan_result& p) {
  const step_memory& m = p.memory;
  const allocator_kind a = p.setup.allocator;
  if (a == allocator_kind::pytorch || a == allocator_kind::expandable) {
    // A model of PyTorch's allocator over the same tensors (docs/plan.md,
    // "PyTorch's allocators"): within 10% of the measured runs.
    const std::string reserve =
        "about " + format_bytes(judged_reserve(p)) + " reserved at the peak";
    if (plan_fits(p)) {
      return std::string("FITS with ") + pytorch_name(a) + ": " + reserve + " of " +
             format_bytes(m.usable) +
             " usable per GPU (a model of it, within 10% of measured runs).";
    }
    return std::string("DOES NOT FIT with ") + pytorch_name(a) + ": " + reserve +
           ", more than the " + format_bytes(m.usable) +
           " usable per GPU (a model of it, within 10% of measured runs)." +
           (m.fits ? " Strata fits it in " + format_bytes(m.peak_reserved) + "." : "");
  }
  if (m.fits) {
    return "FITS: peak reserved " + format_bytes(m.peak_reserved) + " of " +
           format_bytes(m.usable) + " usable per GPU.";
  }
  std::string out = "DOES NOT FIT: in " + m.failed_phase + ", allocating " +
                    format_bytes(m.failed_bytes) + " fails with " +
                    format_bytes(m.free_at_failure) + " free (of " + format_bytes(m.usable) +
                    " usable per GPU).\n";
  // Why, in the user's terms: model states that cannot fit at all, or what
  // filled the GPU when it failed.
  if (p.states.gpu_total() > m.usable) {
    return out + "Why: parameters, gradients and optimizer state alone need " +
           format_bytes(p.states.gpu_total()) + " per GPU.";
  }
  // The two largest parts at that point.
  std::size_t top = 0;
  for (std::size_t c = 1; c < category_count; ++c) {
    if (m.by_category[c] > m.by_category[top]) top = c;
  }
  std::size_t second = top == 0 ? 1 : 0;
  for (std::size_t c = 0; c < category_count; ++c) {
    if (c != top && m.by_category[c] > m.by_category[second]) second = c;
  }
  const auto part = [&](std::size_t c) {
    return std::string(category_name(static_cast<category>(c))) + " " +
           format_bytes(m.by_category[c]);
  };
  out += "Why: " + part(top) + " and " + part(second) + " fill the GPU at that point";
  if (static_cast<category>(top) == category::activations ||
      static_cast<category>(second) == category::activations) {
    out += std::string(" (micro-batch ") + std::to_string(p.setup.micro_batch) + " x " +
           std::to_string(p.setup.seq) + " tokens" +
           (p.setup.checkpointing ? ", checkpointed" : ", not checkpointed") + ")";
  }
  return out + ".";
}

}  // namespace

std::string plan_text(const plan_result& p, const std::vector<fix>& fixes) {
  const plan_setup& s = p.setup;
  const step_memory& m = p.memory;
  std::string out =
      "strata plan: " + model_line(s) + "\n  " + setup_line(s) + "\n\n" + verdict(p) + "\n\n";
  out += m.fits ? "Per GPU at the peak:\n" : "Per GPU when it failed (the request included):\n";
  for (std::size_t c = 0; c < category_count; ++c) {
    const std::string name = category_name(static_cast<category>(c));
    out += "  " + name + std::string(20 - name.size(), ' ') + format_bytes(m.by_category[c]) + "\n";
  }
  if (m.fits) {
    out += "  allocator overhead  " + format_bytes(m.peak_reserved - m.peak_tensors) +
           " (reserved beyond the tensors' peak)\n";
    out += "  peak reserved       " + format_bytes(m.peak_reserved) + "\n";
  }
  // The same tensors under PyTorch's own allocators: estimates (within
  // 7% of the calibration runs, with checkpointing and without,
  // docs/plan.md), so only "does not fit" is a verdict.
  const auto under = [&](const char* name, std::uint64_t reserved) {
    return std::string("  ") + name + "about " + format_bytes(reserved) +
           (reserved > m.usable ? " (does not fit)\n" : "\n");
  };
  // One allocator when --allocator names it, else all three side by side.
  const allocator_kind a = s.allocator;
  out += "Peak reserved by allocator:\n";
  if (a == allocator_kind::all || a == allocator_kind::strata) {
    out += std::string("  Strata                         ") +
           (m.fits ? format_bytes(m.peak_reserved) + " (fits)\n" : "does not fit\n");
  }
  if (a == allocator_kind::all || a == allocator_kind::pytorch) {
    out += under("PyTorch's default              ", p.pytorch.native);
  }
  if (a == allocator_kind::all || a == allocator_kind::expandable) {
    out += under("PyTorch's expandable segments  ", p.pytorch.expandable);
  }
  out += "\nModel states per GPU: Strata " + format_bytes(p.states.gpu_total()) + " on the GPU";
  if (p.states.host > 0) out += ", " + format_bytes(p.states.host) + " in host memory";
  if (p.states.nvme > 0) out += ", " + format_bytes(p.states.nvme) + " on NVMe";
  out += "\n";
  if (p.deepspeed.applies) {
    out += "  DeepSpeed's estimate: " + p.deepspeed.formula;
    if (p.deepspeed.working > 0) {
      out += "; its 4 L (" + format_bytes(p.deepspeed.working) +
             ") is the largest module's working buffer, counted by Strata as collective buffers";
    }
    out += "\n";
  }
  if (p.paper.applies) out += "  ZeRO paper (K = 12): " + p.paper.formula + "\n";
  if (p.host_bytes > 0) out += "Host memory needed per node: " + format_bytes(p.host_bytes) + "\n";
  if (p.nvme_bytes > 0) out += "NVMe space needed per node: " + format_bytes(p.nvme_bytes) + "\n";
  const step_time& t = p.time;
  out += "\nStep, modeled on " + std::to_string(p.setup.gpus) + " GPU" +
         (p.setup.gpus == 1 ? "" : "s") + ": " + seconds(t.total()) + " = compute " +
         seconds(t.compute) + " + exposed collectives " + seconds(t.exposed_collectives) + " (of " +
         seconds(t.collectives) + ") + exposed offload " + seconds(t.exposed_transfers) + " (of " +
         seconds(t.transfers) + ")\n";
  out += "  at " + format_rate(p.setup.rates.tflops) + " TFLOP/s for matmuls and attention and " +
         format_rate(p.setup.rates.hbm_gbps) +
         " GB/s for memory-bound kernels (achieved rates: --gpu, --tflops, --hbm-gbps)\n";
  if (t.params.gathers > 0) {
    out +=
        "  ZeRO-3's parameters through Strata's prefetcher: " + std::to_string(t.params.gathers) +
        " all-gathers a step, " + std::to_string(t.params.gathers_ahead) + " ahead of use, " +
        std::to_string(t.params.gathers_reused) + " kept for the next use";
    if (p.setup.params == offload_to::host) {
      out += "; " + format_bytes(t.params.bytes_from_host) + " of shards filled from host memory";
    } else if (p.setup.params == offload_to::nvme) {
      out += "; " + format_bytes(t.params.bytes_from_nvme) + " of shards read from NVMe";
    }
    out += "\n";
  }
  if (!t.conf.empty()) out += "  The step time assumes STRATA_CONF=" + t.conf + "\n";
  if (!plan_fits(p)) {
    if (fixes.empty()) {
      out +=
          "\nNo change of up to three (ZeRO stage, offload, checkpointing, micro-batch) makes "
          "it fit.\n";
    } else {
      out += "\nChanges that make it fit, fastest step first:\n";
      for (std::size_t i = 0; i < fixes.size() && i < 5; ++i) {
        const plan_result& f = fixes[i].plan;
        out += "  " + std::to_string(i + 1) + ". " + fixes[i].change + ": peak " +
               format_bytes(judged_reserve(f)) + ", step " + seconds(f.time.total());
        if (f.host_bytes > 0) out += ", host " + format_bytes(f.host_bytes) + "/node";
        if (f.nvme_bytes > 0) out += ", NVMe " + format_bytes(f.nvme_bytes) + "/node";
        out += "\n";
      }
    }
  }
  return out;
}

std::string plan_json(const plan_result& p, const std::vector<fix>& fixes) {
  const step_memory& m = p.memory;
  json_object categories;
  for (std::size_t c = 0; c < category_count; ++c) {
    categories.num(category_name(static_cast<category>(c)), m.by_category[c]);
  }
  json_object states;
  states.num("gpu_bytes", p.states.gpu_total())
      .num("host_bytes", p.states.host)
      .num("nvme_bytes", p.states.nvme);
  if (p.deepspeed.applies) {
    states.num("deepspeed_gpu_bytes", p.deepspeed.gpu)
        .num("deepspeed_working_bytes", p.deepspeed.working);
  }
  if (p.paper.applies) states.num("zero_paper_gpu_bytes", p.paper.gpu);
  json_object time;
  time.dbl("total", p.time.total())
      .dbl("compute", p.time.compute)
      .dbl("exposed_collectives", p.time.exposed_collectives)
      .dbl("exposed_offload", p.time.exposed_transfers)
      .str("strata_conf", p.time.conf);
  if (p.time.params.gathers > 0) {
    json_object params;
    params.num("gathers", p.time.params.gathers)
        .num("gathers_ahead", p.time.params.gathers_ahead)
        .num("gathers_reused", p.time.params.gathers_reused)
        .num("bytes_from_host", p.time.params.bytes_from_host)
        .num("bytes_from_nvme", p.time.params.bytes_from_nvme)
        .num("bytes_to_nvme", p.time.params.bytes_to_nvme)
        .num("late_fills", p.time.params.late_fills);
    time.raw("parameters", params.text());
  }
  std::string list;
  for (const fix& f : fixes) {
    json_object one;
    one.str("change", f.change)
        .num("peak_reserved_bytes", f.plan.memory.peak_reserved)
        .num("peak_reserved_pytorch_bytes", f.plan.pytorch.native)
        .num("peak_reserved_expandable_bytes", f.plan.pytorch.expandable)
        .dbl("step_seconds", f.plan.time.total())
        .num("host_bytes_per_node", f.plan.host_bytes)
        .num("nvme_bytes_per_node", f.plan.nvme_bytes);
    list += (list.empty() ? "" : ",") + one.text();
  }
  json_object out;
  out.str("model", p.setup.model.name)
      .num("parameters", total_params(p.setup.model))
      .num("trainable", trainable_params(p.setup))
      .str("setup", setup_line(p.setup))
      .str("allocator", allocator_name(p.setup.allocator))
      .raw("fits", plan_fits(p) ? "true" : "false")
      .raw("fits_with_strata", m.fits ? "true" : "false")
      .num("usable_bytes", m.usable)
      .num("peak_reserved_bytes", m.peak_reserved)
      .num("peak_reserved_pytorch_bytes", p.pytorch.native)
      .num("peak_reserved_expandable_bytes", p.pytorch.expandable)
      .num("peak_tensor_bytes", m.peak_tensors)
      .raw("by_category", categories.text());
  if (!m.fits) {
    json_object failure;
    failure.str("phase", m.failed_phase)
        .num("request_bytes", m.failed_bytes)
        .num("free_bytes", m.free_at_failure);
    out.raw("failure", failure.text());
  }
  out.raw("model_states", states.text())
      .num("host_bytes_per_node", p.host_bytes)
      .num("nvme_bytes_per_node", p.nvme_bytes)
      .raw("step_seconds", time.text())
      .raw("fixes", "[" + list + "]");
  return out.text() + "\n";
}

}  // namespace strata::plan
