// Debian's jemalloc (libjemalloc.so.2), loaded for the pinned host pool only:
// dlopen with RTLD_LOCAL, so its unprefixed malloc/free never become the
// program's (nothing resolves them through the global scope), and only the
// functions the pool calls are looked up on the handle.
//
// jemalloc uses initial-exec TLS (about 2.6 KiB): loaded after the process
// started (by the LibTorch plugin in a running Python, by the preload shim
// at first use), it needs that much static TLS to spare. Without it the
// load fails and `get()` says what to do: start the process with
// GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 (the process keeps
// glibc's malloc either way). Nothing else in Strata needs jemalloc, so the
// program and the rest of Strata run on without the host tier.
//
// Thread safety: `get()` may be called concurrently; the table is filled
// once and never changes.
#pragma once

#include <cstddef>

#include "strata/error.hpp"

namespace strata {

struct jemalloc_library {
  void* (*mallocx)(std::size_t size, int flags) = nullptr;
  void (*dallocx)(void* ptr, int flags) = nullptr;
  std::size_t (*sallocx)(const void* ptr, int flags) = nullptr;
  int (*mallctl)(const char* name, void* oldp, std::size_t* oldlenp, void* newp,
                 std::size_t newlen) = nullptr;

  /// The library, loaded on first use. Errors: not_supported, with the
  /// loader's message and the remedy above.
  static result<const jemalloc_library*> get();
};

}  // namespace strata
