// The plan as one self-contained HTML page (inline CSS, no script, no
// network): the verdict and its reason, a bar per part of the GPU's memory,
// the model-state figures, the step, and the changes that make it fit.
#include <cstdio>

#include "html_escape.hpp"
#include "plan/planner.hpp"
#include "strata/option_table.hpp"

namespace strata::plan {

namespace {

std::string bar_row(const std::string& name, std::uint64_t bytes, std::uint64_t scale) {
  const double pct =
      scale > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(scale) : 0.0;
  char width[32];
  std::snprintf(width, sizeof width, "%.2f", pct > 100 ? 100.0 : pct);
  return "<tr><td>" + html_escape(name) + "</td><td class=n>" + html_escape(format_bytes(bytes)) +
         "</td><td class=bar><div style=\"width:" + width + "%\"></div></td></tr>\n";
}

}  // namespace

std::string plan_html(const plan_result& p, const std::vector<fix>& fixes) {
  const step_memory& m = p.memory;
  // The text report's lines, split into the page's parts.
  const std::string text = plan_text(p, fixes);
  const std::size_t blank = text.find("\n\n");
  const std::string head = text.substr(0, blank);
  const std::size_t verdict_end = text.find("\n\n", blank + 2);
  const std::string verdict = text.substr(blank + 2, verdict_end - blank - 2);
  std::string html =
      "<!doctype html><html><head><meta charset=utf-8><title>strata plan: " +
      html_escape(p.setup.model.name) +
      "</title><style>body{font:14px sans-serif;margin:2em;max-width:60em}"
      "pre{white-space:pre-wrap}.fits{color:#060}.no{color:#a00}td{padding:2px 8px}"
      "td.n{text-align:right}td.bar{width:30em}td.bar div{background:#48c;height:12px}"
      "</style></head><body>\n<h1>strata plan</h1>\n<pre>" +
      html_escape(head) + "</pre>\n<h2 class=" + (plan_fits(p) ? "fits" : "no") + ">" +
      (plan_fits(p) ? "Fits" : "Does not fit") + "</h2>\n<pre>" + html_escape(verdict) +
      "</pre>\n<h2>Per GPU (of " + html_escape(format_bytes(m.usable)) + " usable)</h2>\n<table>\n";
  for (std::size_t c = 0; c < category_count; ++c) {
    html += bar_row(category_name(static_cast<category>(c)), m.by_category[c], m.usable);
  }
  if (m.fits) html += bar_row("peak reserved", m.peak_reserved, m.usable);
  html += "</table>\n<h2>Model states, step time and changes</h2>\n<pre>" +
          html_escape(text.substr(text.find("Model states per GPU"))) + "</pre>\n</body></html>\n";
  return html;
}

}  // namespace strata::plan
