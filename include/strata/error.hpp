// Error reporting for every Strata call: an error code plus a message.
//
// Nothing in Strata aborts the process on bad input or a failing device call;
// every fallible call returns a `status` or a `result<T>`. A success is two
// words with nothing to construct or destroy (no string); an error allocates
// its message once.
//
// Thread safety: `status` and `result<T>` are plain values. Distinct objects
// may be used from different threads; one object is not synchronized.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "strata/export.hpp"

namespace strata {

/// What went wrong. The numeric values are stable: the C API returns them.
enum class errc : int {
  ok = 0,
  invalid_argument = 1,  ///< A caller error: bad size, alignment, handle, spec.
  out_of_memory = 2,     ///< The device (or a host pool) has no room.
  not_supported = 3,     ///< The build or the device lacks the feature.
  no_driver = 4,         ///< No CUDA driver library could be loaded.
  no_device = 5,         ///< A driver loaded but the requested device is absent.
  device_error = 6,      ///< A device call failed for another reason.
  injected_fault = 7,    ///< A failure injected by the sim device's configuration.
  io_error = 8,          ///< A storage read or write failed, fell short or read back wrong data.
  comm_error = 9,        ///< A collective failed: ranks disagreed, one failed or timed out.
};

/// The name of a code, e.g. "out_of_memory". Never null.
/// Thread safety: may be called concurrently.
STRATA_API const char* errc_name(errc code) noexcept;

/// Success, or an error code with a human-readable message.
class [[nodiscard]] STRATA_API status {
 public:
  /// Success.
  status() noexcept = default;
  /// An error. `code` must not be `errc::ok`.
  status(errc code, std::string message)
      : code_(code), message_(std::make_unique<std::string>(std::move(message))) {
    assert(code != errc::ok);
  }
  status(const status& other)
      : code_(other.code_),
        message_(other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr) {}
  status& operator=(const status& other) {
    if (this != &other) *this = status(other);
    return *this;
  }
  status(status&&) noexcept = default;
  status& operator=(status&&) noexcept = default;
  ~status() = default;

  [[nodiscard]] bool ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] errc code() const noexcept { return code_; }
  /// Empty on success.
  [[nodiscard]] const std::string& message() const noexcept {
    static const std::string none;
    return message_ ? *message_ : none;
  }
  /// "code_name: message", or "ok".
  [[nodiscard]] std::string to_string() const;

 private:
  errc code_ = errc::ok;
  std::unique_ptr<std::string> message_;  // null on success
};

/// A value of type T, or the error that prevented it. A fallible yes/no is
/// a `yes_no`, not a `result<bool>` (whose `if (r)` would read as the answer).
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_same_v<T, bool>, "a fallible yes/no is strata::yes_no");

 public:
  result(T value) : value_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  result(status error) : status_(std::move(error)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok());
  }

  [[nodiscard]] bool ok() const noexcept { return status_.ok(); }
  explicit operator bool() const noexcept { return ok(); }
  /// The error; `ok()` when a value is held.
  [[nodiscard]] const status& error() const noexcept { return status_; }
  [[nodiscard]] errc code() const noexcept { return status_.code(); }

  /// The value. Precondition: `ok()`.
  [[nodiscard]] T& value() & {
    assert(ok());
    return *value_;
  }
  [[nodiscard]] const T& value() const& {
    assert(ok());
    return *value_;
  }
  [[nodiscard]] T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::optional<T> value_;
  status status_;
};

/// The answer to a yes/no question that can fail (has the event completed?
/// did memory come free?). It has no conversion to bool, so `if (r)` cannot
/// be mistaken for the answer: `ok()` says "no error", `yes()` is the answer.
class [[nodiscard]] yes_no {
 public:
  explicit yes_no(bool answer) noexcept : answer_(answer) {}
  yes_no(status error) : status_(std::move(error)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok());
  }

  [[nodiscard]] bool ok() const noexcept { return status_.ok(); }
  /// The error; `ok()` when an answer is held.
  [[nodiscard]] const status& error() const noexcept { return status_; }
  [[nodiscard]] errc code() const noexcept { return status_.code(); }
  /// The answer. Precondition: `ok()`.
  [[nodiscard]] bool yes() const noexcept {
    assert(ok());
    return answer_;
  }

 private:
  bool answer_ = false;
  status status_;
};

}  // namespace strata
