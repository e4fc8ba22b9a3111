#include "replay_report.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

#include "step_cycle.hpp"
#include "strata/json_string.hpp"
#include "strata/option_table.hpp"

namespace strata::replay {

namespace {

std::string ratio(std::uint64_t a, std::uint64_t b) {
  if (b == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(a) / static_cast<double>(b));
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

constexpr std::array memory_kinds{
    driver_call::create_pages,    driver_call::release_pages, driver_call::map,
    driver_call::unmap,           driver_call::set_access,    driver_call::reserve,
    driver_call::free_reservation};

// "create_pages 4 (39.6 us), map 4 (6.8 us), ...": the memory calls made.
std::string memory_calls_text(const driver_call_totals& d) {
  std::string out;
  for (driver_call k : memory_kinds) {
    const driver_call_total& t = d[static_cast<std::size_t>(k)];
    if (t.calls == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(driver_call_name(k)) + " " +
           std::to_string(t.calls) + " (" + fixed(static_cast<double>(t.ns) * 1e-6, 1) + " ms)";
  }
  return out.empty() ? "none" : out;
}

// The steady state's JSON: null unless a step was found and repeated.
std::string steady_json(const timeline_result::steady_state& s) {
  if (!s.found) return "null";
  return "{\"step_calls\":" + std::to_string(s.step_ops) + ",\"step_ms\":" + number(s.step_ms) +
         ",\"repeats\":" + std::to_string(s.repeats) +
         ",\"measured_repeats\":" + std::to_string(s.measured) +
         ",\"added_fraction\":" + number(s.added_fraction()) +
         ",\"driver_calls\":" + std::to_string(s.driver_calls) +
         ",\"cpu_ns_per_call\":" + number(s.cpu_ns_per_call) +
         ",\"locked_fraction\":" + number(s.locked_fraction()) +
         ",\"ns_per_locked_call\":" + number(s.ns_per_locked_call()) +
         ",\"peak_reserved_bytes\":" + std::to_string(s.peak_reserved) +
         ",\"peak_live_bytes\":" + std::to_string(s.peak_live) + "}";
}

// The costliest calls as a JSON array, with their stacks.
std::string costly_json(const alloc_trace& trace, const replay_result& r,
                        const std::vector<costly_call>& calls) {
  std::string out = "[";
  for (const costly_call& c : calls) {
    if (out.size() > 1) out += ',';
    const trace_op& op = trace.ops[c.op];
    std::string frames = "[";
    if (op.frames != trace_op::no_frames) {
      for (const std::string& f : trace.frames[op.frames]) {
        frames += (frames.size() > 1 ? "," : "") + json_string(f);
      }
    }
    out += "{\"event\":" + std::to_string(c.op) +
           ",\"action\":" + (op.kind == op_kind::alloc ? "\"alloc\"" : "\"free\"") +
           ",\"size\":" + std::to_string(op.size) + ",\"stream\":" + std::to_string(op.stream) +
           ",\"driver_calls\":" + std::to_string(c.driver_calls) +
           ",\"driver_ms\":" + number(static_cast<double>(c.driver_ns) * 1e-6) +
           ",\"second_half\":" + (r.timeline.on ? (c.second_half ? "true" : "false") : "null") +
           ",\"frames\":" + frames + "]}";
  }
  return out + "]";
}

}  // namespace

std::string timeline_line(const timeline_result& t) {
  return "timeline: allocator added " + fixed(t.added_ms, 1) + " ms over " + fixed(t.trace_ms, 1) +
         " ms of trace (" + fixed(100 * t.added_fraction(), 2) +
         "%); second half: " + fixed(100 * t.second_half_added_fraction(), 2) + "%, " +
         std::to_string(t.second_half_driver_calls) + " driver calls";
}

std::string costly_text(const alloc_trace& trace, const costly_call& c, bool mark_second_half) {
  const trace_op& op = trace.ops[c.op];
  std::string t = "event " + std::to_string(c.op) + ": " +
                  (op.kind == op_kind::alloc ? "alloc " : "free ") + format_bytes(op.size) + ", " +
                  std::to_string(c.driver_calls) + " driver calls, " +
                  fixed(static_cast<double>(c.driver_ns) * 1e-6, 2) + " ms";
  if (mark_second_half && c.second_half) t += " (second half)";
  return t;
}

std::string steady_text(const timeline_result::steady_state& s) {
  if (!s.found && s.step_ops > 0) {
    return "the last step (" + std::to_string(s.step_ops) +
           " calls) is too long to repeat: the repeats may add " +
           std::to_string(max_repeated_ops) + " calls";
  }
  if (!s.found) return "none found: the trace does not end in a repeated step";
  return "the last step (" + std::to_string(s.step_ops) + " calls, " + fixed(s.step_ms, 1) +
         " ms) repeated " + std::to_string(s.repeats) + " times after the trace: the last " +
         std::to_string(s.measured) + " added " + fixed(100 * s.added_fraction(), 2) + "%, " +
         std::to_string(s.driver_calls) + " driver calls, " + fixed(s.cpu_ns_per_call, 0) +
         " ns a call (" + fixed(100 * s.locked_fraction(), 0) + "% locked, " +
         fixed(s.ns_per_locked_call(), 0) + " ns each); peak reserved " +
         ratio(s.peak_reserved, s.peak_live) + " x live";
}

std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out;
}

std::string report_text(const alloc_trace& trace, const replay_result& r) {
  std::string t;
  const auto line = [&](const std::string& k, const std::string& v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %-34s ", k.c_str());
    t += buf + v + "\n";
  };
  t += "strata replay: " + trace.source + " (" + trace.format + ")\n";
  line("device", r.device);
  line("threads",
       r.threads == 2 ? "2 (calls without Python frames, autograd's, from a second one)" : "1");
  line("events replayed", std::to_string(r.events) + " (" + std::to_string(trace.seeds.size()) +
                              " blocks live at the start)");
  if (r.warmup > 0) {
    line("warm-up passes",
         std::to_string(r.warmup) +
             (r.warmup_automatic
                  ? " (the recording held " + format_bytes(trace.baseline_reserved.front()) +
                        " reserved at its first event: it started warm; --warmup 0 replays it "
                        "cold)"
                  : std::string(" (--warmup)")));
  }
  line("peak live bytes", format_bytes(r.peak_live));
  line("Strata peak allocated", format_bytes(r.peak_allocated));
  line("Strata peak reserved", format_bytes(r.peak_reserved) + "  (" +
                                   ratio(r.peak_reserved, r.peak_live) + " x peak live)");
  if (r.has_baseline) {
    line("recording allocator peak reserved", format_bytes(r.baseline_peak_reserved));
    line("Strata / recording allocator", ratio(r.peak_reserved, r.baseline_peak_reserved));
  } else {
    line("recording allocator peak reserved", "not in the trace");
  }
  line("PyTorch's allocator, modeled", "default " + format_bytes(r.modeled_native_peak) +
                                           ", expandable segments " +
                                           format_bytes(r.modeled_expandable_peak));
  line("Strata / expandable segments", ratio(r.peak_reserved, r.modeled_expandable_peak));
  line("fragmentation (1 - alloc/reserved)", number(100 * r.fragmentation) + "% at peak");
  line("stitches", std::to_string(r.stitches) + " (" +
                       format_bytes(static_cast<std::uint64_t>(r.stitched_bytes)) + " remapped)");
  line("allocator time per call", "median " + number(r.cpu_ns_median) + " ns, mean " +
                                      number(r.cpu_ns_mean) + " ns, p99 " + number(r.cpu_ns_p99) +
                                      " ns (" + std::to_string(r.calls) + " calls)");
  line("memory driver calls", memory_calls_text(r.driver));
  line("waits for the device",
       std::to_string(r.device_waits) + " (" + fixed(r.device_wait_ms, 1) + " ms)");
  if (r.costliest.empty()) line("costliest calls (driver time)", "none called the driver");
  for (std::size_t i = 0; i < std::min(r.costliest.size(), costliest_in_text); ++i) {
    line(i == 0 ? "costliest calls (driver time)" : "", costly_text(trace, r.costliest[i], true));
  }
  if (r.timeline.on && r.costliest_second_half.empty()) {
    line("costliest in the second half", "none called the driver");
  }
  for (std::size_t i = 0; i < std::min(r.costliest_second_half.size(), costliest_in_text); ++i) {
    line(i == 0 ? "costliest in the second half" : "",
         costly_text(trace, r.costliest_second_half[i], false));
  }
  if (!trace.failures.empty()) {
    line("recording allocator's OOMs", std::to_string(trace.failures.size()));
    for (const replay_failure& f : r.failures) {
      std::string text = "  " + f.recorded.where + ": requested " + format_bytes(f.recorded.size);
      if (f.recorded.device_free_known) {
        text += ", the device had " + format_bytes(f.recorded.device_free) + " free";
      }
      text += "; Strata had " + format_bytes(f.strata_available) +
              " available there: " + (f.fits ? "it fits" : "it does not fit either") + "\n";
      t += text;
    }
  }
  for (const unknown_action& u : trace.unknown_actions) {
    line("not replayed", std::to_string(u.count) + " events with unknown action '" +
                             printable(u.name) + "' (first at " + u.first + ")");
  }
  line("OOMs", std::to_string(r.ooms.size()));
  if (r.timeline.on) {
    line("timeline: the GPU", r.timeline.gpu);
    line("timeline: memory driver calls",
         std::to_string(r.timeline.driver_calls) + " (" + fixed(r.timeline.driver_ms, 1) + " ms)");
    line("timeline: first mappings",
         std::to_string(r.timeline.runs_created) + " runs created and mapped once, " +
             fixed(r.timeline.first_map_ms, 1) + " ms (" +
             fixed(100 * r.timeline.first_map_fraction(), 2) +
             "% of the trace): what mapping runs of that size costs any allocator "
             "(a driver call costs about the same whatever the run's size)");
    const timeline_result& tl = r.timeline;
    const auto counted = [](std::uint64_t n, const char* one, const char* many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    line("timeline: PyTorch, modeled",
         "expandable segments create and map " + counted(tl.expandable_pages, "page", "pages") +
             " (20 MiB; 2 MiB in the small pool), " +
             (tl.expandable_map_ms
                  ? fixed(*tl.expandable_map_ms, 1) + " ms (" +
                        fixed(100 * tl.expandable_map_fraction(), 2) + "% of the trace)"
                  : std::string("not priced (more than this device holds)")) +
             "; the default allocator makes " +
             counted(tl.native_mallocs, "cudaMalloc call", "cudaMalloc calls") +
             " (0.24-0.32 ms for 64 MiB on an H100)");
    if (r.timeline.steady.tried) line("timeline: steady state", steady_text(r.timeline.steady));
    t += timeline_line(r.timeline) + "\n";
  }
  for (const replay_oom& o : r.ooms) {
    t += "  OOM at event " + std::to_string(o.op) + " (" + format_bytes(o.size) + "):\n    ";
    for (const char c : o.message) {
      t += c;
      if (c == '\n') t += "    ";
    }
    t += "\n";
  }
  return t;
}

std::string report_json(const alloc_trace& trace, const replay_result& r) {
  std::string j = "{";
  const auto field = [&](const char* k, const std::string& v) {
    if (j.size() > 1) j += ',';
    j += json_string(k) + ':' + v;
  };
  field("trace", json_string(trace.source));
  field("format", json_string(trace.format));
  field("device", json_string(r.device));
  field("events", std::to_string(r.events));
  field("seeded_blocks", std::to_string(trace.seeds.size()));
  field("peak_live_bytes", std::to_string(r.peak_live));
  field("peak_allocated_bytes", std::to_string(r.peak_allocated));
  field("peak_reserved_bytes", std::to_string(r.peak_reserved));
  field("peak_reserved_over_live", r.peak_live > 0 ? ratio(r.peak_reserved, r.peak_live) : "null");
  field("baseline_peak_reserved_bytes",
        r.has_baseline ? std::to_string(r.baseline_peak_reserved) : "null");
  field("peak_reserved_over_baseline", r.has_baseline && r.baseline_peak_reserved > 0
                                           ? ratio(r.peak_reserved, r.baseline_peak_reserved)
                                           : "null");
  field("modeled_pytorch_peak_reserved_bytes",
        "{\"default\":" + std::to_string(r.modeled_native_peak) +
            ",\"expandable_segments\":" + std::to_string(r.modeled_expandable_peak) + "}");
  field("peak_reserved_over_expandable",
        r.modeled_expandable_peak > 0 ? ratio(r.peak_reserved, r.modeled_expandable_peak) : "null");
  field("fragmentation", number(r.fragmentation));
  field("threads", std::to_string(r.threads));
  field("warmup_passes", std::to_string(r.warmup));
  field("warmup_automatic", r.warmup_automatic ? "true" : "false");
  field("stitches", std::to_string(r.stitches));
  field("stitched_bytes", std::to_string(r.stitched_bytes));
  std::string driver = "{";
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    driver += std::string(k == 0 ? "" : ",") +
              json_string(driver_call_name(static_cast<driver_call>(k))) +
              ":{\"calls\":" + std::to_string(r.driver[k].calls) +
              ",\"ns\":" + std::to_string(r.driver[k].ns) + "}";
  }
  field("driver_calls", driver + "}");
  field("device_waits", "{\"count\":" + std::to_string(r.device_waits) +
                            ",\"ms\":" + number(r.device_wait_ms) + "}");
  if (r.timeline.on) {
    const timeline_result& tl = r.timeline;
    field("timeline",
          "{\"gpu\":" + json_string(tl.gpu) + ",\"trace_ms\":" + number(tl.trace_ms) +
              ",\"added_ms\":" + number(tl.added_ms) +
              ",\"added_fraction\":" + number(tl.added_fraction()) +
              ",\"second_half_added_fraction\":" + number(tl.second_half_added_fraction()) +
              ",\"second_half_driver_calls\":" + std::to_string(tl.second_half_driver_calls) +
              ",\"driver_calls\":" + std::to_string(tl.driver_calls) +
              ",\"driver_ms\":" + number(tl.driver_ms) + ",\"wait_ms\":" + number(tl.wait_ms) +
              ",\"runs_created\":" + std::to_string(tl.runs_created) +
              ",\"first_map_ms\":" + number(tl.first_map_ms) + ",\"first_map_fraction\":" +
              number(tl.first_map_fraction()) + R"(,"pytorch_modeled":{"expandable_pages":)" +
              std::to_string(tl.expandable_pages) + ",\"expandable_map_ms\":" +
              (tl.expandable_map_ms ? number(*tl.expandable_map_ms) : "null") +
              ",\"expandable_map_fraction\":" +
              (tl.expandable_map_ms ? number(tl.expandable_map_fraction()) : "null") +
              ",\"default_cuda_mallocs\":" + std::to_string(tl.native_mallocs) +
              "},\"steady\":" + steady_json(tl.steady) + "}");
  } else {
    field("timeline", "null");
  }
  field("cpu_ns_per_call",
        "{\"median\":" + number(r.cpu_ns_median) + ",\"mean\":" + number(r.cpu_ns_mean) +
            ",\"p99\":" + number(r.cpu_ns_p99) + ",\"calls\":" + std::to_string(r.calls) + "}");
  field("costliest_calls", costly_json(trace, r, r.costliest));
  field("costliest_second_half_calls",
        r.timeline.on ? costly_json(trace, r, r.costliest_second_half) : "null");
  std::string ooms = "[";
  for (const replay_oom& o : r.ooms) {
    if (ooms.size() > 1) ooms += ',';
    ooms += "{\"event\":" + std::to_string(o.op) + ",\"size\":" + std::to_string(o.size) +
            ",\"report\":" + o.report_json + "}";
  }
  field("ooms", ooms + "]");
  std::string failures = "[";
  for (const replay_failure& f : r.failures) {
    if (failures.size() > 1) failures += ',';
    failures += "{\"where\":" + json_string(f.recorded.where) +
                ",\"size\":" + std::to_string(f.recorded.size) + ",\"device_free\":" +
                (f.recorded.device_free_known ? std::to_string(f.recorded.device_free) : "null") +
                ",\"strata_available\":" + std::to_string(f.strata_available) +
                ",\"fits\":" + (f.fits ? "true" : "false") + "}";
  }
  field("recorded_ooms", failures + "]");
  std::string unknown = "[";
  for (const unknown_action& u : trace.unknown_actions) {
    if (unknown.size() > 1) unknown += ',';
    unknown += "{\"action\":" + json_string(u.name) + ",\"count\":" + std::to_string(u.count) +
               ",\"first\":" + json_string(u.first) + "}";
  }
  field("unknown_actions", unknown + "]");
  return j + "}\n";
}

}  // namespace strata::replay
