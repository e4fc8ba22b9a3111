// The step-time run's error boundary: the code one rank's thread runs
// throws strata::error out of deep call chains, and run_step_ranks turns
// it back into the status it returns.
//
// Thread safety: pure functions.
#pragma once

#include <utility>

#include "strata/error.hpp"
#include "strata/strata.hpp"

namespace strata::plan {

/// Throws strata::error if `s` is an error.
inline void check(const status& s) {
  if (!s) throw error(s);
}

/// The value of `r`; throws strata::error if it is an error.
template <typename T>
T checked(result<T> r) {
  if (!r) throw error(r.error());
  return std::move(*r);
}

}  // namespace strata::plan
