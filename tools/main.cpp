// The `strata` command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "demo_command.hpp"

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

  CLI11_PARSE(app, argc, argv);
  if (*demo) return strata::run_demo(spec);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strata: %s\n", e.what());
  return 1;
}
