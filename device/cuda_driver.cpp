#include "cuda_driver.hpp"

#include <string>

#include "strata/shared_library.hpp"

namespace strata {

namespace {

constexpr int abi_version = 12000;  // the driver ABI Strata's entry points follow

using get_proc_address_v2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);
using get_proc_address_v1 = CUresult (*)(const char*, void**, int, cuuint64_t);

// Resolves every entry point of `d` through the driver's cuGetProcAddress.
status resolve(const shared_library& lib, cuda_driver& d) {
  get_proc_address_v2 v2 = nullptr;
  get_proc_address_v1 v1 = nullptr;
  lib.find("cuGetProcAddress_v2", v2);
  lib.find("cuGetProcAddress", v1);
  if (v2 == nullptr && v1 == nullptr) {
    return {errc::device_error, "libcuda.so.1 has no cuGetProcAddress: the driver is too old"};
  }
  const auto get = [&](const char* name, auto& fn) -> status {
    void* p = nullptr;
    const CUresult r = v2 != nullptr
                           ? v2(name, &p, abi_version, CU_GET_PROC_ADDRESS_DEFAULT, nullptr)
                           : v1(name, &p, abi_version, CU_GET_PROC_ADDRESS_DEFAULT);
    if (r != CUDA_SUCCESS || p == nullptr) {
      return {errc::device_error, std::string("CUDA driver entry point ") + name +
                                      " not found (cuGetProcAddress error " +
                                      std::to_string(static_cast<int>(r)) + ")"};
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return {};
  };
  status s;
  const auto need = [&](const char* name, auto& fn) {
    if (s.ok()) s = get(name, fn);
  };
  need("cuInit", d.init);
  need("cuDriverGetVersion", d.driver_get_version);
  need("cuGetErrorName", d.get_error_name);
  need("cuGetErrorString", d.get_error_string);
  need("cuDeviceGetCount", d.device_get_count);
  need("cuDeviceGet", d.device_get);
  need("cuDeviceGetName", d.device_get_name);
  need("cuDevicePrimaryCtxRetain", d.primary_ctx_retain);
  need("cuDevicePrimaryCtxRelease", d.primary_ctx_release);
  need("cuCtxGetCurrent", d.ctx_get_current);
  need("cuCtxSetCurrent", d.ctx_set_current);
  need("cuCtxSynchronize", d.ctx_synchronize);
  need("cuMemGetInfo", d.mem_get_info);
  need("cuMemGetAllocationGranularity", d.mem_get_allocation_granularity);
  need("cuMemAddressReserve", d.mem_address_reserve);
  need("cuMemAddressFree", d.mem_address_free);
  need("cuMemCreate", d.mem_create);
  need("cuMemRelease", d.mem_release);
  need("cuMemMap", d.mem_map);
  need("cuMemUnmap", d.mem_unmap);
  need("cuMemSetAccess", d.mem_set_access);
  need("cuStreamCreate", d.stream_create);
  need("cuStreamDestroy", d.stream_destroy);
  need("cuStreamSynchronize", d.stream_synchronize);
  need("cuStreamWaitEvent", d.stream_wait_event);
  need("cuEventCreate", d.event_create);
  need("cuEventDestroy", d.event_destroy);
  need("cuEventRecord", d.event_record);
  need("cuEventQuery", d.event_query);
  need("cuEventSynchronize", d.event_synchronize);
  need("cuMemcpyAsync", d.memcpy_async);
  need("cuMemsetD8Async", d.memset_d8_async);
  need("cuMemHostAlloc", d.mem_host_alloc);
  need("cuMemFreeHost", d.mem_free_host);
  need("cuMemHostRegister", d.mem_host_register);
  need("cuMemHostUnregister", d.mem_host_unregister);
  need("cuLaunchHostFunc", d.launch_host_func);
  need("cuModuleLoadData", d.module_load_data);
  need("cuModuleUnload", d.module_unload);
  need("cuModuleGetFunction", d.module_get_function);
  need("cuLaunchKernel", d.launch_kernel);
  return s;
}

result<cuda_driver> load() {
  // The library stays loaded for the life of the process: the driver does
  // not support being unloaded while contexts exist.
  static const shared_library lib("libcuda.so.1");
  if (auto s = lib.open(); !s) {
    return status{errc::no_driver, "no CUDA driver (libcuda.so.1 not found: " + s.message() + ")"};
  }
  cuda_driver d;
  if (auto s = resolve(lib, d); !s) return s;
  // resolve() succeeded, so every entry point below is set.
  int version = 0;
  // NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage)
  if (d.driver_get_version(&version) == CUDA_SUCCESS && version < abi_version) {
    return status{errc::device_error, "CUDA driver version " + std::to_string(version / 1000) +
                                          "." + std::to_string(version % 1000 / 10) +
                                          " is older than 12.0, which Strata needs"};
  }
  const CUresult r = d.init(0);  // NOLINT(clang-analyzer-core.CallAndMessage)
  if (r == CUDA_ERROR_NO_DEVICE) {
    return status{errc::no_device, "CUDA driver loaded, but it reports no CUDA device"};
  }
  if (r != CUDA_SUCCESS) return d.error("cuInit", r);
  return d;
}

}  // namespace

result<const cuda_driver*> cuda_driver::get() {
  static const result<cuda_driver> loaded = load();
  if (!loaded) return loaded.error();
  return &loaded.value();
}

status cuda_driver::error(const char* call, CUresult code) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_error_name == nullptr || get_error_name(code, &name) != CUDA_SUCCESS) name = nullptr;
  if (get_error_string == nullptr || get_error_string(code, &text) != CUDA_SUCCESS) text = nullptr;
  std::string message =
      std::string(call) +
      " failed: " + (name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(code)));
  if (text != nullptr) message += std::string(" (") + text + ")";
  errc kind = errc::device_error;
  if (code == CUDA_ERROR_OUT_OF_MEMORY) kind = errc::out_of_memory;
  if (code == CUDA_ERROR_INVALID_VALUE) kind = errc::invalid_argument;
  return {kind, std::move(message)};
}

}  // namespace strata
