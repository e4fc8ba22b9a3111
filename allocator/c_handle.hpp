// The allocator's C handle (strata.h): a slot (strata/c_extension.hpp) that
// owns a strata::allocator, and counts the residency managers built over it.
//
// Thread safety: the fields are atomics; destroy exchanges `impl` to null.
#pragma once

#include "strata/c_extension.hpp"
#include "strata/strata.h"
#include "strata/strata.hpp"

/// borrow() counts its users; destroy refuses while any is left.
struct strata_allocator : strata::c_api::counted_slot<strata::allocator> {};

namespace strata::c_api {

/// The thread's last error message ("" if none).
const char* last_error_message();

}  // namespace strata::c_api
