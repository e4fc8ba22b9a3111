// Calls libstrata_torch.so's strata_torch_malloc_or_throw as PyTorch's
// CUDAPluggableAllocator does (through a std::function over the dlsym'd
// pointer) and checks that a failure arrives as an exception, never as a
// null pointer: an out-of-memory's message begins "CUDA out of memory.",
// a bad size names the problem, size 0 is null without a throw, and a
// good allocation is usable and freed.
//
//   torch_throwing_alloc LIBRARY      (STRATA_CONF names a small sim device)
#include <dlfcn.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "strata_torch.h"

namespace {

using stream_t = strata_torch_stream;  // cudaStream_t, as the library declares it
using alloc_fn = std::function<void*(std::size_t, int, stream_t)>;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "torch_throwing_alloc: FAILED: %s\n", what.c_str());
  std::exit(1);
}

template <class F>
F* symbol(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) fail(std::string("no symbol ") + name);
  return reinterpret_cast<F*>(p);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

// What the call threw ("" when it returned); its result in `out`.
std::string thrown_by(const alloc_fn& alloc, std::size_t size, void*& out) {
  out = nullptr;
  try {
    out = alloc(size, 0, nullptr);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: torch_throwing_alloc LIBRARY");
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(dlerror());
  // PyTorch passes the size as size_t; the C declaration takes ssize_t.
  auto* raw = symbol<decltype(strata_torch_malloc_or_throw)>(lib, "strata_torch_malloc_or_throw");
  auto* free_fn = symbol<decltype(strata_torch_free)>(lib, "strata_torch_free");
  const alloc_fn alloc = [raw](std::size_t size, int device, stream_t stream) {
    return raw(static_cast<ssize_t>(size), device, stream);
  };

  void* p = nullptr;
  std::string what = thrown_by(alloc, std::size_t{1} << 20, p);
  if (!what.empty() || p == nullptr) fail("a 1 MiB allocation: " + what);
  std::memset(p, 0x5a, 64);  // the sim device's memory is host memory
  free_fn(p, 1 << 20, 0, nullptr);

  what = thrown_by(alloc, 0, p);
  if (!what.empty() || p != nullptr) fail("size 0 must be null without a throw: " + what);

  what = thrown_by(alloc, std::size_t{1} << 50, p);
  if (p != nullptr) fail("a 1 PiB allocation succeeded");
  if (what.rfind("CUDA out of memory. ", 0) != 0 ||
      what.find("cannot allocate") == std::string::npos) {
    fail("the OOM's message: '" + what + "'");
  }

  what = thrown_by(alloc, static_cast<std::size_t>(-5), p);
  if (p != nullptr || what.find("negative size -5") == std::string::npos ||
      what.rfind("CUDA out of memory", 0) == 0) {
    fail("a negative size's message: '" + what + "'");
  }

  // The allocator still works after the failures.
  what = thrown_by(alloc, 4096, p);
  if (!what.empty() || p == nullptr) fail("an allocation after the failures: " + what);
  free_fn(p, 4096, 0, nullptr);
  std::puts("torch_throwing_alloc: OK");
  return 0;
}
