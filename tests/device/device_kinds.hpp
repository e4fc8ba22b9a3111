// The devices the typed device suite runs against. `sim` is always present;
// `cuda` runs on a real GPU, or on the stand-in driver (tests/fakecuda) when
// ctest names it in STRATA_TEST_CUDA_DRIVER; otherwise its tests skip and
// say why (and fail instead when that variable says the stand-in is meant
// to be there).
#pragma once

#include <memory>
#include <string>

#include "fakecuda/fakecuda_control.hpp"
#include "strata/device.hpp"
#include "strata/error.hpp"

namespace strata::testing {

struct sim_kind {
  static constexpr const char* name = "sim";
  static bool required() { return true; }
  // Whether open()/open_slow() get the capacity and speed they ask for.
  static bool configurable() { return true; }
  static result<std::unique_ptr<device>> open() {
    return open_device("sim:capacity=64MiB,granularity=2MiB");
  }
  // Every stream operation waits 2 ms and host<->device copies run at
  // 0.5 GB/s: work queued now is certainly not done a moment later.
  static result<std::unique_ptr<device>> open_slow() {
    return open_device("sim:capacity=64MiB,granularity=2MiB,op_delay_us=2000,h2d_gbps=0.5");
  }
};

struct cuda_kind {
  static constexpr const char* name = "cuda";
  static bool required() { return cuda_expected(); }
  // Only the stand-in can be given a capacity and slow streams.
  static bool configurable() { return stand_in() != nullptr; }
  static result<std::unique_ptr<device>> open() {
    return open_configured("capacity=64MiB,granularity=2MiB");
  }
  static result<std::unique_ptr<device>> open_slow() {
    return open_configured("capacity=64MiB,granularity=2MiB,op_delay_us=2000,h2d_gbps=0.5");
  }

 private:
  // On the stand-in, device 0 becomes the sim device `options` describes
  // (no device may be open); on a real GPU `options` does not apply.
  static result<std::unique_ptr<device>> open_configured(const std::string& options) {
    if (const fakecuda_controls* fake = stand_in(); fake != nullptr) {
      if (fake->configure(0, options.c_str()) != 0) {
        return status{errc::invalid_argument, "the stand-in driver refused configuration '" +
                                                  options + "' (a device is still open?)"};
      }
    }
    return open_device("cuda:0");
  }
};

}  // namespace strata::testing
