// `strata replay TRACE`: replay an allocation trace on Strata and report.
#pragma once

#include <string>

namespace strata {

struct replay_command_options {
  std::string trace;
  std::string device = "sim:capacity=80GiB";
  std::string conf;
  int device_index = 0;
  std::string json_out;      // empty: none
  std::string html_out;      // empty: none
  std::string snapshot_out;  // empty: none; the replay's snapshot pickle
  bool quiet = false;
  bool timeline = false;    // --timeline
  double gpu_lag_ms = 12;   // --gpu-lag-ms
  int warmup = -1;          // --warmup; -1: not given (replay_options::warmup unset)
  int steady_steps = 8;     // --steady-steps
  bool one_thread = false;  // --one-thread
};

/// Runs the replay and writes the reports. Returns the exit code: 0 on a
/// completed replay (OOMs included: they are results), 1 on an error, which
/// is printed on stderr with the file, line or event it concerns.
int run_replay(const replay_command_options& options);

}  // namespace strata
