// The test controls declared in fakecuda.h.
#include "fakecuda.h"

#include <algorithm>
#include <cstring>

#include "call_log.hpp"
#include "entry_points.hpp"
#include "fake_driver.hpp"

extern "C" {

FAKECUDA_EXPORT unsigned long long fakecuda_call_count(const char* name) {
  return fakecuda::calls().count(name);
}

FAKECUDA_EXPORT void fakecuda_reset_calls(void) {
  fakecuda::calls().reset();
}

FAKECUDA_EXPORT int fakecuda_fail_call(const char* name, unsigned long long nth, int result) {
  if (name == nullptr || nth == 0 || result == 0) return -1;
  fakecuda::calls().fail_at(name, nth, static_cast<CUresult>(result));
  return 0;
}

FAKECUDA_EXPORT size_t fakecuda_format_calls(char* buf, size_t size, size_t last) {
  const std::string text = fakecuda::calls().format(last);
  if (buf != nullptr && size > 0) {
    const std::size_t n = std::min(text.size(), size - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

FAKECUDA_EXPORT int fakecuda_configure(int ordinal, const char* sim_options) {
  return fakecuda::fake_driver::get().configure(ordinal, sim_options);
}

FAKECUDA_EXPORT unsigned long long fakecuda_live_objects(void) {
  return fakecuda::fake_driver::get().live_objects();
}

FAKECUDA_EXPORT int fakecuda_backing_allocations(unsigned long long ptr, size_t bytes,
                                                 int* ordinal) {
  return fakecuda::fake_driver::get().backing_allocations(ptr, bytes, ordinal);
}

}  // extern "C"
