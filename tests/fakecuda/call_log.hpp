// Every driver call the stand-in receives: counted by name, the latest ones
// kept with their arguments and results, and failures injected at the Nth
// call of a function.
//
// Cost: one mutex and a few map lookups per call; the record of the last
// `keep` calls is a ring, so a long test does not grow it.
//
// Thread safety: every member may be called concurrently.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

namespace fakecuda {

class call_log {
 public:
  /// Counts a call of `name` (a string literal). Returns the result to
  /// inject instead of running it, or CUDA_SUCCESS to run it.
  CUresult begin(const char* name);
  /// Records the finished call.
  void end(const char* name, std::string args, CUresult result);

  [[nodiscard]] unsigned long long count(const char* name);
  void reset();
  /// The `nth` call of `name` from now returns `result`, once.
  void fail_at(const std::string& name, unsigned long long nth, CUresult result);
  /// The last `last` calls, one per line.
  [[nodiscard]] std::string format(std::size_t last);

 private:
  struct record {
    const char* name;
    std::string args;
    CUresult result;
  };
  struct injection {
    unsigned long long remaining;
    CUresult result;
  };
  static constexpr std::size_t keep = 4096;

  std::mutex mu_;
  unsigned long long total_ = 0;
  std::unordered_map<std::string, unsigned long long> counts_;
  std::unordered_map<std::string, injection> injections_;
  std::deque<record> recent_;
};

/// The process-wide log.
call_log& calls();

/// The name of a CUresult ("CUDA_ERROR_INVALID_VALUE"), or null if unknown.
const char* result_name(CUresult r);
/// Its description, or null if unknown.
const char* result_text(CUresult r);

/// One argument as "name=value": pointers in hex, integers in decimal.
template <class T>
std::string arg(const char* name, T value) {
  char buf[64];
  if constexpr (std::is_pointer_v<T>) {
    std::snprintf(buf, sizeof buf, "%s=%p", name, reinterpret_cast<const void*>(value));
  } else if constexpr (std::is_enum_v<T>) {
    std::snprintf(buf, sizeof buf, "%s=%lld", name, static_cast<long long>(value));
  } else if constexpr (std::is_signed_v<T>) {
    std::snprintf(buf, sizeof buf, "%s=%lld", name, static_cast<long long>(value));
  } else {
    std::snprintf(buf, sizeof buf, "%s=0x%llx", name, static_cast<unsigned long long>(value));
  }
  return buf;
}

/// Arguments joined with ", ".
template <class... Parts>
std::string args(const Parts&... parts) {
  std::string out;
  ((out += (out.empty() ? "" : ", "), out += parts), ...);
  return out;
}

}  // namespace fakecuda
