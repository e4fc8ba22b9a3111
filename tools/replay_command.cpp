#include "replay_command.hpp"

#include <cstdio>

#include "replay/alloc_trace.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "report_file.hpp"

namespace strata {

int run_replay(const replay_command_options& o) {
  auto trace = replay::read_trace(o.trace, o.device_index);
  if (!trace) {
    std::fprintf(stderr, "strata replay: %s\n", trace.error().message().c_str());
    return 1;
  }
  // One warning per action the replay skips, so nothing is dropped unsaid.
  for (const replay::unknown_action& u : trace->unknown_actions) {
    std::fprintf(stderr,
                 "strata replay: warning: %s: %zu events with unknown action '%s' (first at %s) "
                 "are not replayed\n",
                 o.trace.c_str(), u.count, replay::printable(u.name).c_str(), u.first.c_str());
  }
  replay::replay_options ro;
  ro.device = o.device;
  ro.conf = o.conf;
  ro.progress = !o.quiet;
  ro.snapshot = !o.snapshot_out.empty();
  ro.timeline = o.timeline;
  ro.gpu_lag_ms = o.gpu_lag_ms;
  if (o.warmup >= 0) ro.warmup = static_cast<std::size_t>(o.warmup);
  ro.steady_repeats = static_cast<std::size_t>(o.steady_steps);
  ro.autograd_thread = !o.one_thread;
  auto r = replay::replay(*trace, ro);
  if (!r) {
    std::fprintf(stderr, "strata replay: %s\n", r.error().message().c_str());
    return 1;
  }
  bool ok = true;
  if (!o.quiet) {
    const std::string text = replay::report_text(*trace, *r);
    if (std::fputs(text.c_str(), stdout) < 0 || std::fflush(stdout) != 0) {
      std::fprintf(stderr, "strata replay: cannot write the report to stdout\n");
      ok = false;
    }
  }
  if (!o.json_out.empty())
    ok = write_report("replay", o.json_out, replay::report_json(*trace, *r)) && ok;
  if (!o.html_out.empty())
    ok = write_report("replay", o.html_out, replay::report_html(*trace, *r)) && ok;
  if (!o.snapshot_out.empty())
    ok = write_report("replay", o.snapshot_out, r->snapshot_pickle) && ok;
  return ok ? 0 : 1;
}

}  // namespace strata
