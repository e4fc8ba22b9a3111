#include "jemalloc_library.hpp"

#include <dlfcn.h>

#include <string>

namespace strata {

namespace {

result<jemalloc_library> load() {
  void* lib = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe): no thread-safe form
    std::string message = std::string("pinned host tier: cannot load jemalloc: ") +
                          (why != nullptr ? why : "unknown error");
    if (message.find("static TLS") != std::string::npos) {
      message +=
          ". jemalloc needs static TLS that a library loaded after start-up does not get: "
          "start the process with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096";
    } else {
      message += ". Install Debian's libjemalloc2";
    }
    return status{errc::not_supported, std::move(message)};
  }
  jemalloc_library j;
  const auto find = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    return fn != nullptr;
  };
  if (!find("mallocx", j.mallocx) || !find("dallocx", j.dallocx) || !find("sallocx", j.sallocx) ||
      !find("mallctl", j.mallctl)) {
    return status{errc::not_supported,
                  "pinned host tier: libjemalloc.so.2 lacks mallocx/dallocx/sallocx/mallctl"};
  }
  return j;
}

}  // namespace

result<const jemalloc_library*> jemalloc_library::get() {
  static const result<jemalloc_library> loaded = load();
  if (!loaded) return loaded.error();
  return &loaded.value();
}

}  // namespace strata
