// The allocator's C handle (strata.h): a slot (strata/c_extension.hpp) that
// owns a strata::allocator (or, made by handle_over(), names one another
// owner keeps), and counts the residency managers built over it.
//
// Thread safety: the fields are atomics; destroy exchanges `impl` to null.
#pragma once

#include "strata/c_extension.hpp"
#include "strata/strata.h"
#include "strata/strata.hpp"

/// borrow() counts its users; destroy refuses while any is left. `owned`:
/// destroy deletes the allocator (false for handle_over()'s handles, whose
/// destroy ends only the handle). Set before the handle is published.
struct strata_allocator : strata::c_api::counted_slot<strata::allocator> {
  bool owned = true;
};

namespace strata::c_api {

/// The thread's last error message ("" if none).
const char* last_error_message();

}  // namespace strata::c_api
