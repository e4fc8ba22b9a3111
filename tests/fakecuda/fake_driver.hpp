// The stand-in CUDA driver's state and rules. Each fake GPU is a Strata sim
// device (host memory, one worker thread per stream); this layer adds what
// the CUDA driver API documents on top: cuInit first, a current context for
// context calls, flags and properties checked, VMM sizes, addresses and
// offsets in granularity multiples, mappings only inside reservations and
// never over one another, cuMemUnmap of exactly one whole mapping, no
// cuMemAddressFree while mapped, released handles unusable (their memory
// lives until the last mapping goes), streams and events checked against
// the ones created. Mapped memory is PROT_NONE until cuMemSetAccess, so a
// missing access call faults in the test that touches it.
//
// Every method returns the CUresult the entry point returns; the entry
// points (entry_points.cpp) log the call and check `needs` first.
//
// Thread safety: every member may be called concurrently (one mutex guards
// the registries; device work runs outside it).
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim_device.hpp"

// The driver's opaque types, defined here: a CUcontext of the stand-in
// points at one of these, a CUmodule and a CUfunction at the others.
struct CUctx_st {
  int ordinal;
};
struct CUmod_st {
  int ordinal;
  std::string image;  // the fatbin's bytes
};
struct CUfunc_st {
  CUmod_st* module;
  std::string name;
};

namespace fakecuda {

/// What a call needs before it runs.
enum class needs { nothing, init, context };

class fake_driver {
 public:
  static fake_driver& get();

  /// CUDA_SUCCESS when the call may run: initialised, and for `context`
  /// a live current context.
  CUresult check(needs n);

  // --- initialisation, devices, contexts (fake_driver.cpp) ---------------
  CUresult init(unsigned flags);
  static CUresult driver_version(int* version);
  CUresult device_count(int* count);
  CUresult device_get(CUdevice* dev, int ordinal);
  CUresult device_name(char* name, int len, CUdevice dev);
  CUresult primary_retain(CUcontext* ctx, CUdevice dev);
  CUresult primary_release(CUdevice dev);
  static CUresult ctx_get_current(CUcontext* ctx);
  static CUresult ctx_get_device(CUdevice* dev);
  CUresult ctx_set_current(CUcontext ctx);
  CUresult ctx_synchronize();

  // --- memory (fake_memory.cpp) -------------------------------------------
  CUresult mem_get_info(size_t* free, size_t* total);
  CUresult granularity(size_t* g, const CUmemAllocationProp* prop,
                       CUmemAllocationGranularity_flags option);
  CUresult address_reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                           unsigned long long flags);
  CUresult address_free(CUdeviceptr ptr, size_t size);
  CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size,
                      const CUmemAllocationProp* prop, unsigned long long flags);
  CUresult mem_release(CUmemGenericAllocationHandle handle);
  CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                   unsigned long long flags);
  CUresult mem_unmap(CUdeviceptr ptr, size_t size);
  CUresult mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
  // Plain allocations (cuMemAlloc): a reservation, one handle mapped with
  // access, rounded up to the granularity; the async forms are not
  // stream-ordered (they act at once).
  CUresult mem_alloc(CUdeviceptr* ptr, size_t size);
  CUresult mem_free(CUdeviceptr ptr);
  CUresult host_alloc(void** ptr, size_t size, unsigned flags);
  CUresult free_host(void* ptr);
  CUresult host_register(void* ptr, size_t size, unsigned flags);
  CUresult host_unregister(void* ptr);

  // --- streams, events, copies (fake_streams.cpp) -------------------------
  CUresult stream_create(CUstream* stream, unsigned flags);
  CUresult stream_destroy(CUstream stream);
  CUresult stream_synchronize(CUstream stream);
  CUresult stream_wait_event(CUstream stream, CUevent event, unsigned flags);
  CUresult event_create(CUevent* event, unsigned flags);
  CUresult event_destroy(CUevent event);
  CUresult event_record(CUevent event, CUstream stream);
  CUresult event_query(CUevent event);
  CUresult event_synchronize(CUevent event);
  CUresult memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  // Device memory only (the real driver also accepts pinned host memory;
  // Strata never asks for that).
  CUresult memset_async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream);
  CUresult launch_host_func(CUstream stream, CUhostFn fn, void* data);
  /// True for the default streams and streams created and not destroyed.
  bool stream_known(CUstream stream);

  // --- modules and kernels (fake_modules.cpp) ------------------------------
  // A module is a fatbin image (its magic and its size read from the
  // header); its kernels are the names the image holds. Launching one of
  // Strata's kernels (strata_adam, strata_cast, strata_pack, strata_axpy)
  // runs its host twin on the stream, over the fake GPU's memory (host
  // memory), with the argument struct copied at the call as the driver
  // copies kernelParams; any other kernel is CUDA_ERROR_NOT_SUPPORTED.
  CUresult module_load_data(CUmodule* module, const void* image);
  CUresult module_unload(CUmodule module);
  CUresult module_get_function(CUfunction* fn, CUmodule module, const char* name);
  CUresult launch_kernel(CUfunction f, unsigned grid_dim_x, unsigned block_dim_x,
                         unsigned extra_dims, unsigned shared_bytes, CUstream stream, void** params,
                         void** extra);

  // --- test controls (fakecuda.h) -----------------------------------------
  int configure(int ordinal, const char* sim_options);
  unsigned long long live_objects();
  /// The distinct physical allocations (memory handles, cuMemAlloc blocks)
  /// backing [va, va+bytes), and the GPU that owns them; 0 when any byte
  /// is not mapped device memory or the range spans two GPUs.
  int backing_allocations(std::uintptr_t va, std::size_t bytes, int* ordinal);

 private:
  struct gpu {
    std::unique_ptr<strata::sim_device> sim;
    std::unique_ptr<CUctx_st> primary;  // stable: handles stay comparable
    int retains = 0;
  };
  struct handle_info {
    int ordinal;
    strata::page_run run;
    bool released = false;
    unsigned mappings = 0;
  };
  struct mapping_info {
    std::size_t bytes;
    CUmemGenericAllocationHandle handle;
  };
  struct reservation_info {
    int ordinal;
    std::size_t bytes;
  };
  struct allocation_info {
    int ordinal;
    std::size_t bytes;
    strata::page_run run;
  };

  fake_driver();

  // The current context's GPU and its ordinal (check(needs::context) passed).
  gpu& current();
  static int current_ordinal();
  // The GPU a stream belongs to, with its sim handle; null when unknown.
  gpu* stream_gpu(CUstream stream, strata::stream_handle& out);
  gpu* event_gpu(CUevent event);
  // The reservation holding [va, va+bytes), or null. Needs mu_.
  const reservation_info* reservation_of(std::uintptr_t va, std::size_t bytes);
  // Frees a handle's registry entry once released and unmapped. Needs mu_.
  void maybe_forget(CUmemGenericAllocationHandle handle);

  std::mutex mu_;
  bool initialised_ = false;
  std::vector<gpu> gpus_;
  std::unordered_map<CUmemGenericAllocationHandle, handle_info> handles_;
  CUmemGenericAllocationHandle next_handle_ = 1;
  std::map<std::uintptr_t, reservation_info> reservations_;
  std::map<std::uintptr_t, mapping_info> mappings_;
  std::map<std::uintptr_t, allocation_info> allocations_;  // from cuMemAlloc
  std::unordered_map<void*, int> streams_;                 // CUstream -> ordinal
  std::unordered_map<void*, int> events_;                  // CUevent -> ordinal
  std::size_t host_objects_ = 0;                           // pinned buffers + registrations
  std::unordered_map<CUmodule, std::unique_ptr<CUmod_st>> modules_;
  std::unordered_map<CUfunction, std::unique_ptr<CUfunc_st>> functions_;
};

/// A Strata status as the driver's result.
CUresult to_result(const strata::status& s);

}  // namespace fakecuda
