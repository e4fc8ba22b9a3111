// report_html(): one self-contained page (inline SVG and CSS, no script, no
// network): memory over the replay, the page map at Strata's peak, the
// largest live blocks there with their stack frames, the calls that cost the
// most driver time with theirs, and the OOMs.
#include <algorithm>
#include <cstdio>

#include "html_escape.hpp"
#include "replay_report.hpp"
#include "strata/option_table.hpp"

namespace strata::replay {

namespace {

std::string escape(std::string_view s) {
  return html_escape(s);
}

constexpr int chart_w = 960;
constexpr int chart_h = 320;
constexpr int margin = 60;

std::string polyline(const replay_result& r, std::uint64_t replay_sample::*field, double xs,
                     double ys, const char* colour, const char* dash) {
  std::string pts;
  char buf[48];
  for (const replay_sample& s : r.samples) {
    const auto v = static_cast<double>(s.*field);
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", margin + static_cast<double>(s.op) * xs,
                  chart_h - margin / 2.0 - v * ys);
    pts += buf;
  }
  return std::string(R"(<polyline fill="none" stroke=")") + colour +
         R"(" stroke-width="2" stroke-dasharray=")" + dash + R"(" points=")" + pts + "\"/>\n";
}

std::string chart(const replay_result& r) {
  std::uint64_t top = 1;
  std::size_t ops = 1;
  for (const replay_sample& s : r.samples) {
    top = std::max({top, s.live, s.allocated, s.reserved, s.baseline});
    ops = std::max(ops, s.op);
  }
  const double xs = static_cast<double>(chart_w - margin * 2) / static_cast<double>(ops);
  const double ys = static_cast<double>(chart_h - margin) / static_cast<double>(top);
  std::string o = "<svg width=\"" + std::to_string(chart_w) + "\" height=\"" +
                  std::to_string(chart_h) + "\" role=\"img\" aria-label=\"memory over time\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\" stroke=\"#ccc\"/>\n";
  char buf[256];
  for (int k = 0; k <= 4; ++k) {
    const double y = chart_h - margin / 2.0 - (chart_h - margin) * k / 4.0;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                  "<text x=\"4\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                  margin, chart_w - margin, y, y, y + 4,
                  format_bytes(top * static_cast<std::uint64_t>(k) / 4).c_str());
    o += buf;
  }
  for (const replay_oom& oom : r.ooms) {
    const double x = margin + static_cast<double>(oom.op) * xs;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"10\" y2=\"%d\" stroke=\"#d62728\" "
                  "stroke-width=\"2\"/><text x=\"%.1f\" y=\"20\" fill=\"#d62728\" "
                  "font-size=\"12\">OOM</text>\n",
                  x, x, chart_h - margin / 2, x + 3);
    o += buf;
  }
  const double px = margin + static_cast<double>(r.peak_op) * xs;
  std::snprintf(
      buf, sizeof buf,
      "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"10\" y2=\"%d\" stroke=\"#999\" "
      "stroke-dasharray=\"2 3\"/><text x=\"%.1f\" y=\"34\" font-size=\"12\">peak</text>\n",
      px, px, chart_h - margin / 2, px + 3);
  o += buf;
  o += polyline(r, &replay_sample::live, xs, ys, "#7f7f7f", "");
  o += polyline(r, &replay_sample::allocated, xs, ys, "#1f77b4", "");
  o += polyline(r, &replay_sample::reserved, xs, ys, "#ff7f0e", "");
  if (r.has_baseline) o += polyline(r, &replay_sample::baseline, xs, ys, "#d62728", "6 4");
  return o + "</svg>\n";
}

std::string page_map(const replay_result& r) {
  constexpr int cell = 7;
  constexpr int per_row = 128;
  std::string o;
  for (const auto& arena : r.page_map_at_peak) {
    if (arena.pages.empty()) continue;
    const int rows = static_cast<int>((arena.pages.size() + per_row - 1) / per_row);
    char buf[160];
    std::snprintf(buf, sizeof buf, "<h3>%s arena, stream 0x%llx: %zu pages</h3>\n",
                  arena.small ? "small" : "large", static_cast<unsigned long long>(arena.stream),
                  arena.pages.size());
    o += buf;
    o += "<svg width=\"" + std::to_string(per_row * cell) + "\" height=\"" +
         std::to_string(rows * cell) + "\">\n";
    for (std::size_t i = 0; i < arena.pages.size(); ++i) {
      static constexpr const char* fill[] = {"#eeeeee", "#9ecae1", "#08519c"};
      std::snprintf(buf, sizeof buf, R"(<rect x="%zu" y="%zu" width="%d" height="%d" fill="%s"/>)",
                    (i % per_row) * cell, (i / per_row) * cell, cell - 1, cell - 1,
                    fill[std::min<std::uint8_t>(arena.pages[i], 2)]);
      o += buf;
    }
    o += "\n</svg>\n";
  }
  return o;
}

// A call's stack frames, one a line, or "-" when the trace has none for it.
std::string stack_cell(const alloc_trace& trace, std::uint32_t frames) {
  if (frames == trace_op::no_frames || trace.frames[frames].empty()) return "-";
  std::string out;
  for (const std::string& f : trace.frames[frames]) out += escape(f) + "<br>";
  return out;
}

}  // namespace

std::string report_html(const alloc_trace& trace, const replay_result& r) {
  std::string o =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>Strata replay: " +
      escape(trace.source) +
      "</title><style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;vertical-align:top}.key span{display:inline-block;width:24px;height:4px;"
      "margin:0 6px 3px 12px}pre{white-space:pre-wrap;background:#f6f6f6;padding:8px}</style>"
      "</head><body>\n<h1>Strata replay</h1>\n<p>" +
      escape(trace.source) + " (" + escape(trace.format) + ") on " + escape(r.device) + "</p>\n";
  o += "<table>\n";
  const auto row = [&](const std::string& k, const std::string& v) {
    o += "<tr><th>" + escape(k) + "</th><td>" + escape(v) + "</td></tr>\n";
  };
  char buf[96];
  row("events replayed", std::to_string(r.events));
  row("peak live", format_bytes(r.peak_live));
  row("Strata peak allocated", format_bytes(r.peak_allocated));
  std::snprintf(
      buf, sizeof buf, "%s (%.3f x peak live)", format_bytes(r.peak_reserved).c_str(),
      r.peak_live ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_live) : 0.0);
  row("Strata peak reserved", buf);
  row("recording allocator peak reserved",
      r.has_baseline ? format_bytes(r.baseline_peak_reserved) : std::string("not in the trace"));
  row("PyTorch's allocator, modeled", "default " + format_bytes(r.modeled_native_peak) +
                                          ", expandable segments " +
                                          format_bytes(r.modeled_expandable_peak));
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * r.fragmentation);
  row("fragmentation at peak", buf);
  row("stitches", std::to_string(r.stitches));
  std::snprintf(buf, sizeof buf, "median %.0f ns, mean %.0f ns, p99 %.0f ns", r.cpu_ns_median,
                r.cpu_ns_mean, r.cpu_ns_p99);
  row("allocator time per call", buf);
  row("OOMs", std::to_string(r.ooms.size()));
  o += "</table>\n<h2>Memory over the replay</h2>\n<p class=\"key\">"
       "<span style=\"background:#7f7f7f\"></span>live (requested)"
       "<span style=\"background:#1f77b4\"></span>Strata allocated"
       "<span style=\"background:#ff7f0e\"></span>Strata reserved";
  if (r.has_baseline) o += "<span style=\"background:#d62728\"></span>recording allocator reserved";
  o += "</p>\n" + chart(r);
  o += "<h2>Page map at Strata's peak (after event " + std::to_string(r.peak_op) +
       ")</h2>\n<p class=\"key\"><span style=\"background:#08519c;height:8px\"></span>under a live "
       "block<span style=\"background:#9ecae1;height:8px\"></span>mapped, no live block"
       "<span style=\"background:#eeeeee;height:8px\"></span>not mapped</p>\n";
  o += page_map(r);
  o += "<h2>Largest live blocks at the peak</h2>\n<table><tr><th>size</th><th>stream</th>"
       "<th>allocated at event</th><th>stack</th></tr>\n";
  for (const live_block& b : r.largest_at_peak) {
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(b.stream));
    o += "<tr><td>" + format_bytes(b.size) + "</td><td>" + buf + "</td><td>" +
         std::to_string(b.op) + "</td><td>" + stack_cell(trace, b.frames) + "</td></tr>\n";
  }
  o += "</table>\n<h2>Calls that cost the most driver time</h2>\n";
  if (r.costliest.empty()) {
    o += "<p>No call reached the driver.</p>\n";
  } else {
    o += "<table><tr><th>event</th><th>call</th><th>size</th><th>driver calls</th>"
         "<th>driver ms</th><th>stack</th></tr>\n";
  }
  for (const costly_call& c : r.costliest) {
    const trace_op& op = trace.ops[c.op];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(c.driver_ns) * 1e-6);
    o += "<tr><td>" + std::to_string(c.op) + (c.second_half ? " (second half)" : "") + "</td><td>" +
         (op.kind == op_kind::alloc ? "alloc" : "free") + "</td><td>" + format_bytes(op.size) +
         "</td><td>" + std::to_string(c.driver_calls) + "</td><td>" + buf + "</td><td>" +
         stack_cell(trace, op.frames) + "</td></tr>\n";
  }
  if (!r.costliest.empty()) o += "</table>\n";
  o += "<h2>Out of memory</h2>\n";
  if (r.ooms.empty()) o += "<p>No request failed.</p>\n";
  for (const replay_oom& oom : r.ooms) {
    o += "<h3>At event " + std::to_string(oom.op) + "</h3>\n<pre>" + escape(oom.message) +
         "</pre>\n";
  }
  if (!r.failures.empty()) {
    o += "<h2>The recording allocator's OOMs</h2>\n<table><tr><th>where</th><th>requested</th>"
         "<th>device free then</th><th>Strata had</th><th>would it fit</th></tr>\n";
    for (const replay_failure& f : r.failures) {
      o += "<tr><td>" + escape(f.recorded.where) + "</td><td>" + format_bytes(f.recorded.size) +
           "</td><td>" +
           (f.recorded.device_free_known ? format_bytes(f.recorded.device_free) : "-") +
           "</td><td>" + format_bytes(f.strata_available) + "</td><td>" + (f.fits ? "yes" : "no") +
           "</td></tr>\n";
    }
    o += "</table>\n";
  }
  if (!trace.unknown_actions.empty()) {
    o += "<h2>Not replayed</h2>\n<table><tr><th>action</th><th>events</th><th>first at</th></tr>\n";
    for (const unknown_action& u : trace.unknown_actions) {
      o += "<tr><td>" + escape(printable(u.name)) + "</td><td>" + std::to_string(u.count) +
           "</td><td>" + escape(u.first) + "</td></tr>\n";
    }
    o += "</table>\n";
  }
  return o + "</body></html>\n";
}

}  // namespace strata::replay
