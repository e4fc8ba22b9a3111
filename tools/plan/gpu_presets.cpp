#include "plan/gpu_presets.hpp"

#include <array>

namespace strata::plan {

namespace {

constexpr std::array presets{h100_preset};

}  // namespace

std::span<const gpu_preset> gpu_presets() {
  return presets;
}

const gpu_preset* find_gpu_preset(std::string_view name) {
  for (const gpu_preset& p : presets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace strata::plan
