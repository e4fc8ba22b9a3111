#include "frame_symbols.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace strata {

namespace {

std::string demangled(const char* name) {
  int ok = -1;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &ok),
                                                  &std::free);
  return ok == 0 && out ? std::string(out.get()) : std::string(name);
}

}  // namespace

const frame_symbol& frame_symbols::of(void* pc) {
  auto [it, fresh] = cache_.try_emplace(pc);
  if (!fresh) return it->second;
  frame_symbol& s = it->second;
  Dl_info info{};
  // A return address points after the call: look up the call's byte.
  const void* call = static_cast<const char*>(pc) - 1;
  if (dladdr(call, &info) == 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", pc);
    s.name = buf;
    s.filename = "??";
    return s;
  }
  s.filename = info.dli_fname != nullptr ? info.dli_fname : "??";
  if (info.dli_sname != nullptr) {
    s.name = demangled(info.dli_sname);
  } else {
    const char* base = s.filename.c_str();
    if (const char* slash = std::strrchr(base, '/')) base = slash + 1;
    char buf[64];
    std::snprintf(buf, sizeof buf, "+0x%zx",
                  static_cast<std::size_t>(static_cast<const char*>(call) -
                                           static_cast<const char*>(info.dli_fbase)));
    s.name = std::string(base) + buf;
  }
  return s;
}

}  // namespace strata
