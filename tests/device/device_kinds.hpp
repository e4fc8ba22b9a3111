// The devices the typed device suite runs against. `sim` is always present;
// `cuda` only where a driver and a GPU exist (otherwise its tests skip and
// say why).
#pragma once

#include <memory>

#include "strata/device.hpp"

namespace strata::testing {

struct sim_kind {
  static constexpr const char* name = "sim";
  static constexpr bool always_present = true;
  static constexpr bool has_small_capacity = true;
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
  static constexpr bool always_present = false;
  static constexpr bool has_small_capacity = false;
  static result<std::unique_ptr<device>> open() { return open_device("cuda:0"); }
  static result<std::unique_ptr<device>> open_slow() { return open(); }
};

}  // namespace strata::testing
