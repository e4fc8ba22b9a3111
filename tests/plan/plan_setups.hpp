// The setups the plan's tests share: a preset model, and one under amp.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "plan/model_shape.hpp"
#include "plan/plan_setup.hpp"

namespace strata::plan {

inline plan_setup preset(const char* name) {
  plan_setup s;
  auto m = find_model(name);
  EXPECT_TRUE(m.ok()) << name;
  if (m) s.model = *m;
  return s;
}

// `name` under amp at `micro` x `seq` tokens on one GPU: the schedule
// tests' setup.
inline plan_setup amp_setup(const char* name, std::uint64_t micro, std::uint64_t seq) {
  plan_setup s = preset(name);
  s.dtype = precision::amp;
  s.micro_batch = micro;
  s.seq = seq;
  return s;
}

}  // namespace strata::plan
