// The `strata` command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "demo_command.hpp"
#include "replay_command.hpp"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 1, as documented.
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (*demo) return strata::run_demo(spec);
  if (*replay) return strata::run_replay(ro);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strata: %s\n", e.what());
  return 1;
}
