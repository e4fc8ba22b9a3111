// What the allocator reports when a request cannot be served: the numbers
// a user needs, and a verdict that says what would have made it fit.
//
// Built under the allocator's mutex at the end of the OOM chain (see
// caching_allocator.hpp); rendered as text (logged once per OOM, and the
// message of the out_of_memory error) and as JSON (the snapshot's
// "last_oom", last_oom_report()).
//
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/error.hpp"

namespace strata {

struct oom_report {
  struct live_block {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    std::uintptr_t stream = 0;
  };

  std::size_t requested = 0;    // the caller's size, bytes
  std::size_t needed = 0;       // bytes of pages the request needs
  std::uintptr_t stream = 0;    // the request's native stream
  std::size_t capacity = 0;     // device memory
  std::size_t device_free = 0;  // free on the device at the OOM
  bool device_free_known = false;
  std::size_t limit = 0;  // capacity x memory_fraction
  double memory_fraction = 1.0;
  std::size_t allocated = 0;  // live blocks (rounded sizes)
  std::size_t reserved = 0;   // pages held
  std::size_t reserved_unallocated = 0;
  std::size_t idle = 0;                // idle pages in the page pool
  std::size_t obtainable = 0;          // idle pages plus pages the limit and device still allow
  std::size_t largest_free_range = 0;  // largest free block whose pages are all mapped
  std::size_t pending_bytes = 0;       // freed, still waiting on events
  std::uintptr_t pending_stream = 0;   // the stream holding most of them
  std::size_t pending_on_stream = 0;
  std::size_t handlers_asked = 0;  // bytes the pressure handlers were asked for
  std::size_t handlers_freed = 0;
  std::size_t handler_failures = 0;      // handlers that threw
  std::vector<live_block> largest_live;  // up to ten, largest first
  std::string verdict;

  /// Fills `verdict` from the numbers.
  void decide();
  [[nodiscard]] std::string to_text() const;
  [[nodiscard]] std::string to_json() const;
};

// What the allocator's locked allocation path returns: a value, or an
// error. The error of a device shortage carries what the request lacked
// (caching_allocator::shortage_of), so it travels back with the error to
// the end of the OOM chain, which asks the pressure handlers for that much
// and, when the OOM stands, completes the report, logs it and keeps it (no
// member holds it in between). Other errors (a bad stream, a host
// shortage, a device failure) carry none.
template <class T>
class [[nodiscard]] attempt {
 public:
  attempt(T value) : result_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  attempt(status error) : result_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  // A device shortage: out_of_memory; the report's text becomes the message
  // once the chain has completed it.
  explicit attempt(oom_report report)
      : result_(status{errc::out_of_memory, "out of memory"}), report_(std::move(report)) {}
  // The failure of another attempt, passed on. Precondition: `failed` failed.
  template <class U>
  attempt(attempt<U>&& failed)  // NOLINT(google-explicit-constructor)
      : result_(failed.error()), report_(std::move(failed.report())) {}

  [[nodiscard]] bool ok() const noexcept { return result_.ok(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const status& error() const noexcept { return result_.error(); }
  T& operator*() & { return *result_; }
  T* operator->() { return &*result_; }
  // The report of a device shortage; empty otherwise.
  std::optional<oom_report>& report() noexcept { return report_; }
  // The value or the error, without the report.
  result<T> take() && { return std::move(result_); }

 private:
  result<T> result_;
  std::optional<oom_report> report_;
};

}  // namespace strata
