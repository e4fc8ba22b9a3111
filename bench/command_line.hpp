// The command lines of the benchmarks that are not Google Benchmark ones
// (gradients_bench, nvme_bench, prefetch_bench): `--key value` pairs. `--help`
// prints the usage and exits 0; a key without a value, an unknown key or a
// value that is not wholly a number in its range ends the program (exit 1)
// naming it, before anything runs or touches a disk.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "exit_on_error.hpp"
#include "strata/option_table.hpp"

namespace bench {

/// argv's `--key value` pairs, in order; `usage` is the line `--help` prints.
inline std::vector<std::pair<std::string, std::string>> option_pairs(int argc, char** argv,
                                                                     const char* usage) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") {
      std::printf("usage: %s\n", usage);
      std::exit(0);  // NOLINT(concurrency-mt-unsafe): before any thread starts
    }
    if (i + 1 == argc) die(key + " needs a value\nusage: " + usage);
    out.emplace_back(key, argv[i + 1]);
  }
  return out;
}

/// Ends the program: `key` is not an option; `usage` says which are.
[[noreturn]] inline void unknown_option(const std::string& key, const char* usage) {
  die("unknown option " + key + "\nusage: " + usage);
}

/// `value` as a whole number in [lo, hi] (strata::parse_count), or the
/// program ends naming `key`.
inline std::uint64_t whole_number(const std::string& key, const std::string& value,
                                  std::uint64_t lo, std::uint64_t hi) {
  const auto n = strata::parse_count(key, value);
  if (!n || *n < lo || *n > hi) {
    die(key + " must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
        ", not '" + value + "'");
  }
  return *n;
}

/// `value` as a finite number in [lo, hi] (strata::parse_number; `lo`
/// itself excluded when `above_lo`), or the program ends naming `key`.
inline double real_number(const std::string& key, const std::string& value, double lo, double hi,
                          bool above_lo = false) {
  const auto x = strata::parse_number(key, value);
  if (!x || *x < lo || (above_lo && *x == lo) || *x > hi) {
    char range[96];
    std::snprintf(range, sizeof range, above_lo ? "above %g and at most %g" : "from %g to %g", lo,
                  hi);
    die(key + " must be a number " + range + ", not '" + value + "'");
  }
  return *x;
}

}  // namespace bench
