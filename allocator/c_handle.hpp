// The allocator's C handle (strata.h): a slot (strata/c_extension.hpp) that
// owns a strata::allocator, and counts the residency managers built over it.
//
// Thread safety: the fields are atomics; destroy exchanges `impl` to null.
#pragma once

#include <atomic>

#include "strata/strata.h"
#include "strata/strata.hpp"

struct strata_allocator {
  std::atomic<strata::allocator*> impl{nullptr};
  /// borrow() counts; destroy refuses while any is left.
  std::atomic<unsigned> users{0};
};

namespace strata::c_api {

/// The thread's last error message ("" if none).
const char* last_error_message();

}  // namespace strata::c_api
