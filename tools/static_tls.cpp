#include "static_tls.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace strata {

void reexec_with_static_tls(char** argv) {
  constexpr const char* key = "glibc.rtld.optional_static_tls";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): main(), before any thread starts
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, key) != nullptr) return;
  std::string value = std::string(key) + "=4096";
  if (tunables != nullptr && *tunables != '\0') value = std::string(tunables) + ":" + value;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): main(), before any thread starts
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace strata
