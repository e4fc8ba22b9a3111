// `strata plan` runs the pinned host tier, whose jemalloc is loaded with
// dlopen and needs static TLS that a library loaded after start-up does
// not get (tiers/jemalloc_library.hpp). glibc reads the setting that
// grants it, GLIBC_TUNABLES, only at start-up, so rather than ask every
// user to set it, the command re-executes itself once with it added.
//
// Thread safety: call from main() before any thread starts.
#pragma once

namespace strata {

/// If GLIBC_TUNABLES does not already set glibc.rtld.optional_static_tls,
/// adds glibc.rtld.optional_static_tls=4096 to it and re-executes
/// /proc/self/exe with `argv` (so it returns only when that is already set,
/// or when the exec fails: the host tier then says what to do).
void reexec_with_static_tls(char** argv);

}  // namespace strata
