#include "real_cuda.hpp"

#include "strata/shared_library.hpp"

namespace strata::preload {

namespace {

// The next definition after the shim's own; else `library`'s, if given.
template <class Fn>
void find(Fn& fn, const char* name, const shared_library* library) {
  void* p = shared_library::find_next(name);
  if (p == nullptr && library != nullptr) p = library->find(name);
  fn = reinterpret_cast<Fn>(p);
}

real_cuda load() {
  real_cuda r;
  find(r.malloc, "cudaMalloc", nullptr);
  find(r.free, "cudaFree", nullptr);
  find(r.malloc_async, "cudaMallocAsync", nullptr);
  find(r.free_async, "cudaFreeAsync", nullptr);
  find(r.malloc_async_ptsz, "cudaMallocAsync_ptsz", nullptr);
  find(r.free_async_ptsz, "cudaFreeAsync_ptsz", nullptr);
  find(r.mem_get_info, "cudaMemGetInfo", nullptr);
  find(r.get_device, "cudaGetDevice", nullptr);
  // Already loaded (the runtime dlopens it) or not used at all: RTLD_NOLOAD
  // never loads a driver the program did not want.
  static const shared_library driver("libcuda.so.1", shared_library::open_mode::if_already_loaded);
  find(r.mem_alloc, "cuMemAlloc_v2", &driver);
  find(r.mem_free, "cuMemFree_v2", &driver);
  find(r.mem_alloc_async, "cuMemAllocAsync", &driver);
  find(r.mem_free_async, "cuMemFreeAsync", &driver);
  find(r.cu_mem_get_info, "cuMemGetInfo_v2", &driver);
  find(r.ctx_get_device, "cuCtxGetDevice", &driver);
  find(r.get_proc_address, "cuGetProcAddress_v2", &driver);
  find(r.get_proc_address_v1, "cuGetProcAddress", &driver);
  return r;
}

}  // namespace

const real_cuda& real() {
  static const real_cuda table = load();
  return table;
}

int current_context_device() {
  CUdevice d = 0;
  if (real().ctx_get_device != nullptr && real().ctx_get_device(&d) == CUDA_SUCCESS) return d;
  return 0;
}

int current_device() {
  int d = 0;
  if (real().get_device != nullptr && real().get_device(&d) == cudaSuccess) return d;
  return current_context_device();
}

}  // namespace strata::preload
