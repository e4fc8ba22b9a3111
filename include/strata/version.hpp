// The library's version.
#pragma once

#include "strata/export.hpp"

namespace strata {

/// The version of libstrata, e.g. "0.1.0". Thread safety: may be called
/// concurrently.
STRATA_API const char* version() noexcept;

}  // namespace strata
