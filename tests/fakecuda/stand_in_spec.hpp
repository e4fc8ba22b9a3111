// The device a test opens: the sim device it names, or, when ctest runs the
// test over the stand-in driver (STRATA_TEST_CUDA_DRIVER), the cuda device
// with the stand-in's GPU 0 configured from the same sim keys (a fake GPU
// is a sim device: capacity, granularity, faults and delays carry over).
// So one test body checks the cuda device's path as the driver API takes
// it, without a GPU.
//
// Thread safety: call it before the test opens its device, from one
// thread; the stand-in refuses to reconfigure a GPU that is still open.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "fakecuda/fakecuda_control.hpp"
#include "strata/error.hpp"

namespace strata::testing {

/// The device spec to open for `sim_spec` ("sim:key=value,..."): itself,
/// or "cuda:0" with the stand-in configured as above. Errors: no_driver
/// (STRATA_TEST_CUDA_DRIVER is set, but libcuda.so.1 is not the
/// stand-in), invalid_argument (the stand-in refused the keys, or GPU 0 is
/// still open).
inline result<std::string> stand_in_spec(const std::string& sim_spec) {
  if (!cuda_expected()) return sim_spec;
  const fakecuda_controls* fake = stand_in();
  if (fake == nullptr) {
    return status{errc::no_driver,
                  "STRATA_TEST_CUDA_DRIVER is set, but libcuda.so.1 is not the stand-in driver"};
  }
  const std::size_t colon = sim_spec.find(':');
  const std::string keys = colon == std::string::npos ? "" : sim_spec.substr(colon + 1);
  if (fake->configure(0, keys.c_str()) != 0) {
    return status{errc::invalid_argument,
                  "the stand-in driver refused '" + keys + "' (is another device still open?)"};
  }
  return std::string("cuda:0");
}

/// stand_in_spec(sim_spec) for a test body: a refusal is a test failure,
/// and the test goes on on `sim_spec`.
inline std::string test_device_spec(const std::string& sim_spec) {
  auto spec = stand_in_spec(sim_spec);
  EXPECT_TRUE(spec.ok()) << spec.error().to_string();
  return spec ? *spec : sim_spec;
}

}  // namespace strata::testing
