// The benchmarks' error handling: a command-line program that reports the
// first error, prefixed with its own name, and exits 1.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "strata/error.hpp"

namespace bench {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);  // NOLINT(concurrency-mt-unsafe): reported once, then the process ends
}

/// The value of `r`, or die naming `what`.
template <typename T>
T take(strata::result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().to_string());
  return std::move(*r);
}

/// Die naming `what` unless `s` is OK.
inline void check(const strata::status& s, const char* what) {
  if (!s) die(std::string(what) + ": " + s.to_string());
}

}  // namespace bench
