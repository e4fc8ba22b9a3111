// For C APIs built over Strata's (the residency manager's, strata/residency.h):
// handle slots, the per-thread last error that strata_last_error_message()
// reports, and the C++ allocator behind a strata_allocator handle.
//
// A handle is a small slot that outlives what it names: destroy empties the
// slot (which keeps its bytes until the process exits), so later calls with
// the handle are reported as errors instead of touching freed memory.
//
// Thread safety: every function may be called from any thread; the last
// error is per thread.
#pragma once

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <type_traits>

#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/strata.h"
#include "strata/strata.hpp"

namespace strata::c_api {

/// A new, empty slot of type `Slot`; slots are never reused or freed.
template <class Slot>
Slot* new_slot() {
  static std::mutex mu;
  static std::deque<Slot> slots;
  std::lock_guard lock(mu);
  return &slots.emplace_back();
}

/// What the handle `slot` names now (the slot's atomic `impl`); null for a
/// null handle or one whose object was destroyed.
template <class Slot>
auto slot_target(Slot* slot) {
  return slot == nullptr ? nullptr : slot->impl.load(std::memory_order_acquire);
}

/// The integer a C caller passed for an enum parameter. C lets any int
/// through where an enum is declared; in C++ reading an enum outside its
/// enumerators' range is undefined, so its bytes are read instead. Validate
/// the result against the enumerators before converting back.
template <class E>
requires std::is_enum_v<E> std::underlying_type_t<E> enum_value(const E& e) {
  std::underlying_type_t<E> v{};
  std::memcpy(&v, &e, sizeof v);
  return v;
}

/// Records `s`'s message as the thread's last error and returns its code.
STRATA_API strata_status fail(const status& s);
STRATA_API strata_status fail(errc code, const char* message);
/// fail(invalid_argument, "null output pointer"): an output argument was null.
STRATA_API strata_status null_output();
/// STRATA_OK, or fail(s).
STRATA_API strata_status to_c(const status& s);
/// `*out` = a malloc'ed copy of `text` (freed with strata_string_free).
/// Errors: invalid_argument (null `out`), out_of_memory.
STRATA_API strata_status copy_out(const std::string& text, char** out);
/// The same for counters: one JSON object {"name":value,...} in name order.
STRATA_API strata_status copy_out(const stat_map& counters, char** out);

/// The C++ allocator behind `handle`, counted as in use until give_back():
/// strata_allocator_destroy fails with invalid_argument while a use is
/// counted. Null (nothing counted) for a null or destroyed handle.
STRATA_API allocator* borrow(strata_allocator* handle);
/// Ends one borrow() of `handle`.
STRATA_API void give_back(strata_allocator* handle);

}  // namespace strata::c_api
