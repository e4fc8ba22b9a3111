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
  const double billions = static_cast<double>(total_params(s.model)) / 1e9;
  std::string line = s.model.name + " (" + fmt("%.2f", billions) + " B parameters), ";
  line += s.dtype == precision::fp32 ? "fp32" : "bf16 with fp32 master weights";
  if (s.lora_rank > 0) {
    line += ", LoRA rank " + std::to_string(s.lora_rank) + " on " +
            (s.lora_mlp ? "attention and MLP" : "attention") + " (" +
            fmt("%.1f", static_cast<double>(trainable_params(s)) / 1e6) + " M trainable)";
  }
  return line;
}

std::string verdict(const plan_result& p) {
  const step_memory& m = p.memory;
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
  std::size_t top = 0;
  for (std::size_t c = 1; c < category_count; ++c) {
    if (m.by_category[c] > m.by_category[top]) top = c;
  }
  out += "Why: " + std::string(category_name(static_cast<category>(top))) + " take " +
         format_bytes(m.by_category[top]) + " at that point";
  if (static_cast<category>(top) == category::activations) {
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
  std::uint64_t tensors = 0;
  for (std::size_t c = 0; c < category_count; ++c) {
    tensors += m.by_category[c];
    out += "  " + std::string(category_name(static_cast<category>(c))) +
           std::string(20 - std::string(category_name(static_cast<category>(c))).size(), ' ') +
           format_bytes(m.by_category[c]) + "\n";
  }
  if (m.fits) {
    out += "  allocator overhead  " + format_bytes(m.peak_reserved - m.peak_tensors) +
           " (reserved beyond the tensors' peak)\n";
    out += "  peak reserved       " + format_bytes(m.peak_reserved) + "\n";
  }
  out += "\nModel states per GPU: Strata " + format_bytes(p.states.gpu_total()) + " on the GPU";
  if (p.states.host > 0) out += ", " + format_bytes(p.states.host) + " in host memory";
  if (p.states.nvme > 0) out += ", " + format_bytes(p.states.nvme) + " on NVMe";
  out += "\n";
  if (p.deepspeed.applies) {
    out += "  DeepSpeed's estimate: " + p.deepspeed.formula;
    if (p.deepspeed.working > 0) {
      out += " (4 L = " + format_bytes(p.deepspeed.working) +
             ": the largest module's working buffer, which Strata counts as collective "
             "buffers)";
    }
    out += "\n";
  }
  if (p.paper.applies) out += "  ZeRO paper (K = 12): " + p.paper.formula + "\n";
  if (p.host_bytes > 0) out += "Host memory needed per node: " + format_bytes(p.host_bytes) + "\n";
  if (p.nvme_bytes > 0) out += "NVMe space needed per node: " + format_bytes(p.nvme_bytes) + "\n";
  const step_time& t = p.time;
  out += "\nEstimated step: " + seconds(t.total()) + " = compute " + seconds(t.compute) +
         " + exposed collectives " + seconds(t.exposed_collectives) + " (of " +
         seconds(t.collectives) + ") + exposed offload " + seconds(t.exposed_transfers) + " (of " +
         seconds(t.transfers) + ")\n";
  if (!m.fits) {
    if (fixes.empty()) {
      out +=
          "\nNo change of up to three (ZeRO stage, offload, checkpointing, micro-batch) makes "
          "it fit.\n";
    } else {
      out += "\nChanges that make it fit, fastest step first:\n";
      for (std::size_t i = 0; i < fixes.size() && i < 5; ++i) {
        const plan_result& f = fixes[i].plan;
        out += "  " + std::to_string(i + 1) + ". " + fixes[i].change + ": peak " +
               format_bytes(f.memory.peak_reserved) + ", step " + seconds(f.time.total());
        if (f.host_bytes > 0) out += ", host " + format_bytes(f.host_bytes) + "/node";
        if (f.nvme_bytes > 0) out += ", NVMe " + format_bytes(f.nvme_bytes) + "/node";
        out += "\n";
      }
    }
  }
  return out;
}

std::string plan_json(const plan_result& p, const std::vector<fix>& fixes) {
  const auto num = [](std::uint64_t v) { return std::to_string(v); };
  const auto dbl = [](double v) { return fmt("%.6g", v); };
  const step_memory& m = p.memory;
  std::string j = "{\"model\":" + json_string(p.setup.model.name) +
                  ",\"parameters\":" + num(total_params(p.setup.model)) +
                  ",\"trainable\":" + num(trainable_params(p.setup)) +
                  ",\"setup\":" + json_string(setup_line(p.setup)) +
                  ",\"fits\":" + (m.fits ? "true" : "false") +
                  ",\"usable_bytes\":" + num(m.usable) +
                  ",\"peak_reserved_bytes\":" + num(m.peak_reserved) +
                  ",\"peak_tensor_bytes\":" + num(m.peak_tensors) + ",\"by_category\":{";
  for (std::size_t c = 0; c < category_count; ++c) {
    j += (c > 0 ? "," : "") + json_string(category_name(static_cast<category>(c))) + ":" +
         num(m.by_category[c]);
  }
  j += "}";
  if (!m.fits) {
    j += ",\"failure\":{\"phase\":" + json_string(m.failed_phase) +
         ",\"request_bytes\":" + num(m.failed_bytes) + ",\"free_bytes\":" + num(m.free_at_failure) +
         "}";
  }
  j += ",\"model_states\":{\"gpu_bytes\":" + num(p.states.gpu_total()) +
       ",\"host_bytes\":" + num(p.states.host) + ",\"nvme_bytes\":" + num(p.states.nvme);
  if (p.deepspeed.applies) {
    j += ",\"deepspeed_gpu_bytes\":" + num(p.deepspeed.gpu) +
         ",\"deepspeed_working_bytes\":" + num(p.deepspeed.working);
  }
  if (p.paper.applies) j += ",\"zero_paper_gpu_bytes\":" + num(p.paper.gpu);
  j += "},\"host_bytes_per_node\":" + num(p.host_bytes) +
       ",\"nvme_bytes_per_node\":" + num(p.nvme_bytes) +
       ",\"step_seconds\":{\"total\":" + dbl(p.time.total()) +
       ",\"compute\":" + dbl(p.time.compute) +
       ",\"exposed_collectives\":" + dbl(p.time.exposed_collectives) +
       ",\"exposed_offload\":" + dbl(p.time.exposed_transfers) + "},\"fixes\":[";
  for (std::size_t i = 0; i < fixes.size(); ++i) {
    const plan_result& f = fixes[i].plan;
    j += std::string(i > 0 ? "," : "") + "{\"change\":" + json_string(fixes[i].change) +
         ",\"peak_reserved_bytes\":" + num(f.memory.peak_reserved) +
         ",\"step_seconds\":" + dbl(f.time.total()) +
         ",\"host_bytes_per_node\":" + num(f.host_bytes) +
         ",\"nvme_bytes_per_node\":" + num(f.nvme_bytes) + "}";
  }
  j += "]}\n";
  return j;
}

}  // namespace strata::plan
