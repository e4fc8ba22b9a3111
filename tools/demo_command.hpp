// `strata demo`: exercises a device step by step and prints what it did.
#pragma once

#include <string>

namespace strata {

/// Runs the demo on the device named by `spec`; returns the exit code.
int run_demo(const std::string& spec);

}  // namespace strata
