// What the C API's handles are, and the error plumbing its functions share:
// the allocator's C API (c_api.cpp) and the residency manager's
// (tiers/residency_c_api.cpp).
//
// A handle is a small slot that outlives what it names: destroy empties the
// slot (which keeps its bytes until the process exits), so later calls with
// the handle are reported as errors instead of touching freed memory.
//
// Thread safety: new_slot and the error functions may be called from any
// thread; the last error is per thread.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <string>

#include "caching_allocator.hpp"
#include "strata/strata.h"

struct strata_allocator {
  std::atomic<strata::caching_allocator*> impl{nullptr};
  /// Residency managers built over this allocator; destroy refuses while
  /// any is left.
  std::atomic<unsigned> users{0};
};

namespace strata::c_api {

/// A new, empty slot of type `Slot`; slots are never reused or freed.
template <class Slot>
Slot* new_slot() {
  static std::mutex mu;
  static std::deque<Slot> slots;
  std::lock_guard lock(mu);
  return &slots.emplace_back();
}

/// Records `s`'s message as the thread's last error and returns its code.
strata_status fail(const status& s);
strata_status fail(errc code, const char* message);
/// STRATA_OK, or fail(s).
strata_status to_c(const status& s);
/// `*out` = a malloc'ed copy of `text` (freed with strata_string_free).
strata_status copy_out(const std::string& text, char** out);
/// The thread's last error message ("" if none).
const char* last_error_message();

}  // namespace strata::c_api
