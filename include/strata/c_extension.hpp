// For C APIs built over Strata's (the residency manager's, strata/residency.h):
// handle slots, the per-thread last error that strata_last_error_message()
// reports, and the C++ allocator behind a strata_allocator handle.
//
// A handle is a small slot that outlives what it names: destroy empties the
// slot (which keeps its bytes until the process exits), so later calls with
// the handle are reported as errors instead of touching freed memory. Every
// C API here writes a handle the same way: new_handle() to create,
// borrow_from()/give_back_to() for a handle built over another (counted, so
// the other's destroy refuses while users_of() it remain), take_object() to
// destroy, conf_of() and section_of() for a create call's `conf`.
//
// Thread safety: every function may be called from any thread; the last
// error is per thread.
#pragma once

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/conf_text.hpp"
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

/// The members of a slot other handles borrow (borrow_from, users_of): the
/// object it names and the count of borrows. Slots derive from it.
template <class T>
struct counted_slot {
  std::atomic<T*> impl{nullptr};
  std::atomic<unsigned> users{0};
};

/// The object type a slot names (its `impl` is a std::atomic<T*>).
template <class Slot>
using slot_object = std::remove_pointer_t<decltype(std::declval<Slot&>().impl.load())>;

/// A new slot naming `object`, which it owns until take_object().
template <class Slot>
Slot* new_handle(std::unique_ptr<slot_object<Slot>> object) {
  Slot* slot = new_slot<Slot>();
  slot->impl.store(object.release(), std::memory_order_release);
  return slot;
}

/// For slots with a use count (an atomic `users` member): the object
/// `slot` names, counted as in use until give_back_to(slot); null, with
/// nothing counted, for a null slot or a destroyed object. A handle built
/// over another borrows it for its whole life, so the other's destroy can
/// refuse while it is used (users_of).
template <class Slot>
slot_object<Slot>* borrow_from(Slot* slot) {
  if (slot == nullptr) return nullptr;
  slot->users.fetch_add(1, std::memory_order_acq_rel);
  slot_object<Slot>* object = slot->impl.load(std::memory_order_acquire);
  if (object == nullptr) slot->users.fetch_sub(1, std::memory_order_acq_rel);
  return object;
}

/// Ends one borrow_from(slot).
template <class Slot>
void give_back_to(Slot* slot) {
  slot->users.fetch_sub(1, std::memory_order_acq_rel);
}

/// The borrows counted on `slot` while its object is alive (0 once it is
/// destroyed, or for a null slot).
template <class Slot>
unsigned users_of(Slot* slot) {
  return slot_target(slot) != nullptr ? slot->users.load(std::memory_order_acquire) : 0;
}

/// Takes the object out of `slot` to destroy it: the slot then names
/// nothing, and later calls with it are errors. Null for a null slot or an
/// object already destroyed.
template <class Slot>
std::unique_ptr<slot_object<Slot>> take_object(Slot* slot) {
  if (slot == nullptr) return nullptr;
  return std::unique_ptr<slot_object<Slot>>(
      slot->impl.exchange(nullptr, std::memory_order_acq_rel));
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

/// A create call's `conf` (strata.h's convention), parsed once: the text,
/// or STRATA_CONF when it is null; each layer takes its section from it
/// (allocator_options_from, tier_options_from, ...). Errors:
/// conf_text::parse's, invalid_argument naming the key.
STRATA_API result<conf_text> conf_of(const char* conf);

/// A layer's section of a create call's `conf`: conf_of(), then `from`
/// (allocator_options_from, tier_options_from, ...) over the section's
/// defaults. Errors: either's.
template <class Config>
result<Config> section_of(const char* conf, result<Config> (*from)(const conf_text&, Config)) {
  auto parsed = conf_of(conf);
  if (!parsed) return parsed.error();
  return from(*parsed, Config{});
}

/// The C++ allocator behind `handle`, counted as in use until give_back():
/// strata_allocator_destroy fails with invalid_argument while a use is
/// counted. Null (nothing counted) for a null or destroyed handle.
STRATA_API allocator* borrow(strata_allocator* handle);
/// Ends one borrow() of `handle`.
STRATA_API void give_back(strata_allocator* handle);

/// A new handle naming `a` without owning it, for an integration that
/// keeps its allocator itself (libstrata_torch.so's strata_torch_allocator):
/// the C APIs build over it as over any handle (residency managers,
/// prefetchers, kernels), and strata_allocator_destroy ends the handle and
/// leaves `a` alive. The caller keeps `a` alive while the handle, or
/// anything built over it, is used. Handles are small and never freed
/// (new_slot): make one per allocator, not one per call. Thread safe.
STRATA_API strata_allocator* handle_over(allocator& a);

}  // namespace strata::c_api
