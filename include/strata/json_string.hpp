// JSON string literals for the reports Strata writes by hand (snapshot,
// OOM report, replay report).
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

#include "strata/export.hpp"

namespace strata {

/// `s` as a JSON string literal, quotes included: `"` and `\` escaped,
/// control characters as \u00XX. Other bytes pass through unchanged.
[[nodiscard]] STRATA_API std::string json_string(std::string_view s);

}  // namespace strata
