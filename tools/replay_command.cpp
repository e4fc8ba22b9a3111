#include "replay_command.hpp"

#include <cstdio>
#include <fstream>

#include "replay/alloc_trace.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"

namespace strata {

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "strata replay: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace

int run_replay(const replay_command_options& o) {
  auto trace = replay::read_trace(o.trace, o.device_index);
  if (!trace) {
    std::fprintf(stderr, "strata replay: %s\n", trace.error().message().c_str());
    return 1;
  }
  replay::replay_options ro;
  ro.device = o.device;
  ro.conf = o.conf;
  ro.progress = !o.quiet;
  auto r = replay::replay(*trace, ro);
  if (!r) {
    std::fprintf(stderr, "strata replay: %s: %s\n", o.trace.c_str(), r.error().to_string().c_str());
    return 1;
  }
  if (!o.quiet) std::fputs(replay::report_text(*trace, *r).c_str(), stdout);
  bool ok = true;
  if (!o.json_out.empty()) ok = write_file(o.json_out, replay::report_json(*trace, *r)) && ok;
  if (!o.html_out.empty()) ok = write_file(o.html_out, replay::report_html(*trace, *r)) && ok;
  return ok ? 0 : 1;
}

}  // namespace strata
