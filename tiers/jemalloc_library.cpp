#include "jemalloc_library.hpp"

#include <string>

#include "strata/shared_library.hpp"

namespace strata {

namespace {

result<jemalloc_library> load() {
  static const shared_library lib("libjemalloc.so.2");
  if (auto s = lib.open(); !s) {
    std::string message = "pinned host tier: cannot load jemalloc: " + s.message();
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
  if (!lib.find("mallocx", j.mallocx) || !lib.find("dallocx", j.dallocx) ||
      !lib.find("sallocx", j.sallocx) || !lib.find("mallctl", j.mallctl)) {
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
