#include "strata/shared_library.hpp"

#include <dlfcn.h>

namespace strata {

status shared_library::open() const {
  std::call_once(once_, [&] {
    const int flags =
        RTLD_NOW | RTLD_LOCAL | (mode_ == open_mode::if_already_loaded ? RTLD_NOLOAD : 0);
    handle_ = dlopen(file_, flags);
    if (handle_ == nullptr) {
      // Called once, under call_once: no other dlerror of ours can interleave.
      const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe)
      why_ = why != nullptr                          ? why
             : mode_ == open_mode::if_already_loaded ? std::string(file_) + " is not loaded"
                                                     : std::string(file_) + ": unknown error";
    }
  });
  if (handle_ != nullptr) return {};
  return {errc::not_supported, why_};
}

void* shared_library::find(const char* symbol) const {
  if (!open().ok()) return nullptr;
  return dlsym(handle_, symbol);
}

void* shared_library::find_next(const char* symbol) {
  return dlsym(RTLD_NEXT, symbol);
}

}  // namespace strata
