// Names and text forms of `errc` and `status`.
#include "strata/error.hpp"

namespace strata {

const char* errc_name(errc code) noexcept {
  switch (code) {
    case errc::ok:
      return "ok";
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::out_of_memory:
      return "out_of_memory";
    case errc::not_supported:
      return "not_supported";
    case errc::no_driver:
      return "no_driver";
    case errc::no_device:
      return "no_device";
    case errc::device_error:
      return "device_error";
    case errc::injected_fault:
      return "injected_fault";
    case errc::io_error:
      return "io_error";
    case errc::comm_error:
      return "comm_error";
  }
  return "unknown_error";
}

std::string status::to_string() const {
  if (ok()) return "ok";
  return std::string(errc_name(code_)) + ": " + message();
}

}  // namespace strata
