// Test-side access to the stand-in driver's controls (fakecuda.h): resolved
// with dlsym from libcuda.so.1, so a test binary runs unchanged on a real
// driver (where `stand_in()` is null) and needs no link to the stand-in.
//
// ctest runs a suite over the stand-in by setting STRATA_TEST_CUDA_DRIVER to
// its path: loaded first, it is the libcuda.so.1 that Strata's later
// dlopen("libcuda.so.1") finds (glibc matches loaded libraries by soname).
//
// Thread safety: `stand_in()` may be called concurrently; the table is
// filled once.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace strata::testing {

struct fakecuda_controls {
  unsigned long long (*call_count)(const char* name);
  void (*reset_calls)();
  int (*fail_call)(const char* name, unsigned long long nth, int result);
  size_t (*format_calls)(char* buf, size_t size, size_t last);
  int (*configure)(int ordinal, const char* sim_options);
  unsigned long long (*live_objects)();

  /// The last `last` driver calls, one per line.
  [[nodiscard]] std::string recent_calls(std::size_t last) const {
    std::string text(format_calls(nullptr, 0, last) + 1, '\0');
    text.resize(format_calls(text.data(), text.size(), last));
    return text;
  }
};

/// The controls when the libcuda.so.1 this process loads is the stand-in,
/// else null.
inline const fakecuda_controls* stand_in() {
  static const fakecuda_controls* controls = []() -> const fakecuda_controls* {
    const char* path = std::getenv("STRATA_TEST_CUDA_DRIVER");  // NOLINT(concurrency-mt-unsafe)
    // Stays loaded, as a driver must.
    void* lib = dlopen(path != nullptr ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    static fakecuda_controls c{};
    const auto get = [lib](const char* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    const bool all =
        get("fakecuda_call_count", c.call_count) && get("fakecuda_reset_calls", c.reset_calls) &&
        get("fakecuda_fail_call", c.fail_call) && get("fakecuda_format_calls", c.format_calls) &&
        get("fakecuda_configure", c.configure) && get("fakecuda_live_objects", c.live_objects);
    return all ? &c : nullptr;
  }();
  return controls;
}

/// True when ctest runs this binary over the stand-in
/// (STRATA_TEST_CUDA_DRIVER is set): cuda tests must then run, not skip.
inline bool cuda_expected() {
  const char* v = std::getenv("STRATA_TEST_CUDA_DRIVER");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr && *v != '\0';
}

}  // namespace strata::testing
