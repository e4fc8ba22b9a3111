#include "cuda_device.hpp"

#include <array>
#include <string>
#include <utility>

namespace strata {

class cuda_device::context_scope {
 public:
  explicit context_scope(const cuda_device& d) : drv_(d.drv_) {
    if (drv_.ctx_get_current(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
    switched_ = previous_ != d.ctx_ && drv_.ctx_set_current(d.ctx_) == CUDA_SUCCESS;
  }
  ~context_scope() {
    if (switched_) drv_.ctx_set_current(previous_);
  }
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;
  context_scope(context_scope&&) = delete;
  context_scope& operator=(context_scope&&) = delete;

 private:
  const cuda_driver& drv_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

namespace {

CUstream native(stream_handle s) {
  return static_cast<CUstream>(s.native);
}
CUevent native(event_handle e) {
  return static_cast<CUevent>(e.native);
}
CUdeviceptr dptr(std::uintptr_t p) {
  return static_cast<CUdeviceptr>(p);
}

// Pinned device memory on device `ordinal`, not exportable.
CUmemAllocationProp allocation_prop(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  return prop;
}

}  // namespace

result<std::unique_ptr<cuda_device>> cuda_device::open(int ordinal) {
  auto loaded = cuda_driver::get();
  if (!loaded) return loaded.error();
  const cuda_driver& drv = **loaded;
  int count = 0;
  if (CUresult r = drv.device_get_count(&count); r != CUDA_SUCCESS) {
    return drv.error("cuDeviceGetCount", r);
  }
  if (ordinal < 0 || ordinal >= count) {
    return status{errc::no_device, "cuda:" + std::to_string(ordinal) +
                                       " requested, but the driver reports " +
                                       std::to_string(count) + " CUDA device(s)"};
  }
  CUdevice dev = 0;
  if (CUresult r = drv.device_get(&dev, ordinal); r != CUDA_SUCCESS) {
    return drv.error("cuDeviceGet", r);
  }
  std::array<char, 256> name{};
  if (drv.device_get_name(name.data(), static_cast<int>(name.size()), dev) != CUDA_SUCCESS) {
    name[0] = '\0';
  }
  CUcontext ctx = nullptr;
  if (CUresult r = drv.primary_ctx_retain(&ctx, dev); r != CUDA_SUCCESS) {
    return drv.error("cuDevicePrimaryCtxRetain", r);
  }
  const CUmemAllocationProp prop = allocation_prop(ordinal);
  std::size_t granularity = 0;
  if (CUresult r =
          drv.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS || granularity == 0) {
    drv.primary_ctx_release(dev);
    return r != CUDA_SUCCESS ? drv.error("cuMemGetAllocationGranularity", r)
                             : status{errc::device_error, "the driver reports a zero granularity"};
  }
  std::string label = "cuda:" + std::to_string(ordinal) + " (" + name.data() + ")";
  return std::unique_ptr<cuda_device>(
      new cuda_device(drv, ordinal, dev, ctx, granularity, std::move(label)));
}

cuda_device::cuda_device(const cuda_driver& driver, int ordinal, CUdevice dev, CUcontext ctx,
                         std::size_t granularity, std::string name)
    : drv_(driver), ordinal_(ordinal), dev_(dev), ctx_(ctx), name_(std::move(name)) {
  set_granularity(granularity);
}

cuda_device::~cuda_device() {
  {
    // Nothing queued may touch what goes away, so the work finishes first.
    // Teardown is best effort: a failing call cannot be reported from here.
    context_scope scope(*this);
    drv_.ctx_synchronize();
    for (void* s : owned_streams_) drv_.stream_destroy(static_cast<CUstream>(s));
    for (void* e : events_) drv_.event_destroy(static_cast<CUevent>(e));
    for (const auto& [va, bytes] : mappings_) drv_.mem_unmap(dptr(va), bytes);
    for (std::uint64_t run : page_runs_) drv_.mem_release(run);
    for (const auto& [base, bytes] : reservations_) drv_.mem_address_free(dptr(base), bytes);
    for (void* p : host_buffers_) drv_.mem_free_host(p);
    for (void* p : registrations_) drv_.mem_host_unregister(p);
    for (void* m : modules_) drv_.module_unload(static_cast<CUmodule>(m));
  }
  drv_.primary_ctx_release(dev_);
}

std::string cuda_device::do_name() const {
  return name_;
}

result<memory_info> cuda_device::do_get_memory_info() {
  context_scope scope(*this);
  memory_info info;
  if (CUresult r = drv_.mem_get_info(&info.free, &info.total); r != CUDA_SUCCESS) {
    return drv_.error("cuMemGetInfo", r);
  }
  return info;
}

result<std::uintptr_t> cuda_device::do_reserve(std::size_t bytes, std::size_t alignment) {
  context_scope scope(*this);
  CUdeviceptr p = 0;
  if (CUresult r = drv_.mem_address_reserve(&p, bytes, alignment, 0, 0); r != CUDA_SUCCESS) {
    return drv_.error("cuMemAddressReserve", r);
  }
  std::lock_guard lock(mu_);
  reservations_.emplace(static_cast<std::uintptr_t>(p), bytes);
  return static_cast<std::uintptr_t>(p);
}

bool cuda_device::reserved_here(std::uintptr_t va, std::size_t bytes) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return false;
  --it;
  return va - it->first <= it->second && bytes <= it->second - (va - it->first);
}

status cuda_device::do_free_reservation(std::uintptr_t base, std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    auto it = reservations_.find(base);
    if (it == reservations_.end() || it->second != bytes) {
      return {errc::invalid_argument, "free_reservation: not a whole reservation of this device"};
    }
    auto inside = mappings_.lower_bound(base);
    if (inside != mappings_.end() && inside->first < base + bytes) {
      return {errc::invalid_argument, "free_reservation: the range still has mappings"};
    }
  }
  context_scope scope(*this);
  if (CUresult r = drv_.mem_address_free(dptr(base), bytes); r != CUDA_SUCCESS) {
    return drv_.error("cuMemAddressFree", r);
  }
  std::lock_guard lock(mu_);
  reservations_.erase(base);
  return {};
}

result<page_run> cuda_device::do_create_pages(std::size_t bytes) {
  context_scope scope(*this);
  const CUmemAllocationProp prop = allocation_prop(ordinal_);
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = drv_.mem_create(&handle, bytes, &prop, 0); r != CUDA_SUCCESS) {
    return drv_.error("cuMemCreate", r);
  }
  std::lock_guard lock(mu_);
  page_runs_.insert(handle);
  return page_run{handle, bytes};
}

status cuda_device::do_release_pages(page_run run) {
  context_scope scope(*this);
  if (CUresult r = drv_.mem_release(run.id); r != CUDA_SUCCESS) {
    return drv_.error("cuMemRelease", r);
  }
  std::lock_guard lock(mu_);
  page_runs_.erase(run.id);
  return {};
}

status cuda_device::do_map(std::uintptr_t va, std::size_t bytes, page_run run) {
  {
    // The driver maps past a reservation's end (it checks only that the
    // range is reserved by someone), after which freeing the reservation
    // fails: every range is checked against this device's own first.
    std::lock_guard lock(mu_);
    if (!reserved_here(va, bytes)) {
      return {errc::invalid_argument,
              "map: the range is not inside one reservation of this device"};
    }
    auto next = mappings_.lower_bound(va);
    const bool overlaps_next = next != mappings_.end() && next->first < va + bytes;
    const bool overlaps_prev =
        next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second > va;
    if (overlaps_next || overlaps_prev) {
      return {errc::invalid_argument, "map: the range overlaps a mapping"};
    }
  }
  context_scope scope(*this);
  if (CUresult r = drv_.mem_map(dptr(va), bytes, 0, run.id, 0); r != CUDA_SUCCESS) {
    return drv_.error("cuMemMap", r);
  }
  std::lock_guard lock(mu_);
  mappings_.emplace(va, bytes);
  return {};
}

status cuda_device::do_unmap(std::uintptr_t va, std::size_t bytes) {
  context_scope scope(*this);
  return unmap_recorded(va, bytes);
}

status cuda_device::unmap_recorded(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  // [va, va+bytes) must be whole recorded mappings with no gap; checked
  // before any is unmapped, so a refused call changes nothing.
  std::uintptr_t end = va;
  for (auto it = mappings_.find(va); it != mappings_.end() && it->first == end && end < va + bytes;
       ++it) {
    end += it->second;
  }
  if (mappings_.find(va) == mappings_.end() || end != va + bytes) {
    return {errc::invalid_argument, "unmap: the range is not whole mappings of this device"};
  }
  for (auto it = mappings_.find(va); it != mappings_.end() && it->first < va + bytes;) {
    if (CUresult r = drv_.mem_unmap(dptr(it->first), it->second); r != CUDA_SUCCESS) {
      return drv_.error("cuMemUnmap", r);
    }
    it = mappings_.erase(it);
  }
  return {};
}

status cuda_device::do_set_access(std::uintptr_t va, std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (!reserved_here(va, bytes)) {
      return {errc::invalid_argument,
              "set_access: the range is not inside one reservation of this device"};
    }
  }
  context_scope scope(*this);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = drv_.mem_set_access(dptr(va), bytes, &access, 1); r != CUDA_SUCCESS) {
    return drv_.error("cuMemSetAccess", r);
  }
  return {};
}

result<stream_handle> cuda_device::do_create_stream() {
  context_scope scope(*this);
  CUstream s = nullptr;
  if (CUresult r = drv_.stream_create(&s, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    return drv_.error("cuStreamCreate", r);
  }
  std::lock_guard lock(mu_);
  owned_streams_.insert(s);
  return stream_handle{s};
}

status cuda_device::do_destroy_stream(stream_handle stream) {
  {
    std::lock_guard lock(mu_);
    if (owned_streams_.erase(stream.native) == 0) {
      return {errc::invalid_argument, "destroy_stream: the stream was not created by this device"};
    }
  }
  context_scope scope(*this);
  if (CUresult r = drv_.stream_destroy(native(stream)); r != CUDA_SUCCESS) {
    return drv_.error("cuStreamDestroy", r);
  }
  return {};
}

result<stream_handle> cuda_device::do_wrap_stream(void* native) {
  return stream_handle{native};
}

result<event_handle> cuda_device::do_create_event() {
  context_scope scope(*this);
  CUevent e = nullptr;
  if (CUresult r = drv_.event_create(&e, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
    return drv_.error("cuEventCreate", r);
  }
  std::lock_guard lock(mu_);
  events_.insert(e);
  return event_handle{e};
}

status cuda_device::do_destroy_event(event_handle event) {
  context_scope scope(*this);
  if (CUresult r = drv_.event_destroy(native(event)); r != CUDA_SUCCESS) {
    return drv_.error("cuEventDestroy", r);
  }
  std::lock_guard lock(mu_);
  events_.erase(event.native);
  return {};
}

status cuda_device::do_record_event(event_handle event, stream_handle stream) {
  context_scope scope(*this);
  if (CUresult r = drv_.event_record(native(event), native(stream)); r != CUDA_SUCCESS) {
    return drv_.error("cuEventRecord", r);
  }
  return {};
}

yes_no cuda_device::do_query_event(event_handle event) {
  context_scope scope(*this);
  const CUresult r = drv_.event_query(native(event));
  if (r == CUDA_SUCCESS) return yes_no{true};
  if (r == CUDA_ERROR_NOT_READY) return yes_no{false};
  return drv_.error("cuEventQuery", r);
}

status cuda_device::do_synchronize_event(event_handle event) {
  context_scope scope(*this);
  if (CUresult r = drv_.event_synchronize(native(event)); r != CUDA_SUCCESS) {
    return drv_.error("cuEventSynchronize", r);
  }
  return {};
}

status cuda_device::do_stream_wait_event(stream_handle stream, event_handle event) {
  context_scope scope(*this);
  if (CUresult r = drv_.stream_wait_event(native(stream), native(event), 0); r != CUDA_SUCCESS) {
    return drv_.error("cuStreamWaitEvent", r);
  }
  return {};
}

status cuda_device::do_launch_host_fn(stream_handle stream, host_fn fn, void* arg) {
  context_scope scope(*this);
  if (CUresult r = drv_.launch_host_func(native(stream), fn, arg); r != CUDA_SUCCESS) {
    return drv_.error("cuLaunchHostFunc", r);
  }
  return {};
}

status cuda_device::do_make_current() {
  if (CUresult r = drv_.ctx_set_current(ctx_); r != CUDA_SUCCESS) {
    return drv_.error("cuCtxSetCurrent", r);
  }
  return {};
}

status cuda_device::do_synchronize_stream(stream_handle stream) {
  context_scope scope(*this);
  if (CUresult r = drv_.stream_synchronize(native(stream)); r != CUDA_SUCCESS) {
    return drv_.error("cuStreamSynchronize", r);
  }
  return {};
}

status cuda_device::do_synchronize() {
  context_scope scope(*this);
  if (CUresult r = drv_.ctx_synchronize(); r != CUDA_SUCCESS) {
    return drv_.error("cuCtxSynchronize", r);
  }
  return {};
}

status cuda_device::do_copy_async(void* dst, const void* src, std::size_t bytes,
                                  copy_direction /*direction*/, stream_handle stream) {
  // Unified addressing: the driver infers the direction from the pointers.
  context_scope scope(*this);
  const CUresult r = drv_.memcpy_async(reinterpret_cast<CUdeviceptr>(dst),
                                       reinterpret_cast<CUdeviceptr>(src), bytes, native(stream));
  if (r != CUDA_SUCCESS) return drv_.error("cuMemcpyAsync", r);
  return {};
}

status cuda_device::do_memset_async(void* dst, unsigned char value, std::size_t bytes,
                                    stream_handle stream) {
  context_scope scope(*this);
  const CUresult r =
      drv_.memset_d8_async(reinterpret_cast<CUdeviceptr>(dst), value, bytes, native(stream));
  if (r != CUDA_SUCCESS) return drv_.error("cuMemsetD8Async", r);
  return {};
}

result<void*> cuda_device::do_host_alloc(std::size_t bytes) {
  context_scope scope(*this);
  void* p = nullptr;
  if (CUresult r = drv_.mem_host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE); r != CUDA_SUCCESS) {
    return drv_.error("cuMemHostAlloc", r);
  }
  std::lock_guard lock(mu_);
  host_buffers_.insert(p);
  return p;
}

status cuda_device::do_host_free(void* ptr) {
  context_scope scope(*this);
  if (CUresult r = drv_.mem_free_host(ptr); r != CUDA_SUCCESS) {
    return drv_.error("cuMemFreeHost", r);
  }
  std::lock_guard lock(mu_);
  host_buffers_.erase(ptr);
  return {};
}

status cuda_device::do_host_register(void* ptr, std::size_t bytes) {
  context_scope scope(*this);
  if (CUresult r = drv_.mem_host_register(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE);
      r != CUDA_SUCCESS) {
    return drv_.error("cuMemHostRegister", r);
  }
  std::lock_guard lock(mu_);
  registrations_.insert(ptr);
  return {};
}

status cuda_device::do_host_unregister(void* ptr) {
  context_scope scope(*this);
  if (CUresult r = drv_.mem_host_unregister(ptr); r != CUDA_SUCCESS) {
    return drv_.error("cuMemHostUnregister", r);
  }
  std::lock_guard lock(mu_);
  registrations_.erase(ptr);
  return {};
}

result<module_handle> cuda_device::do_load_module(const void* image) {
  context_scope scope(*this);
  CUmodule module = nullptr;
  if (CUresult r = drv_.module_load_data(&module, image); r != CUDA_SUCCESS) {
    return drv_.error("cuModuleLoadData", r);
  }
  std::lock_guard lock(mu_);
  modules_.insert(module);
  return module_handle{module};
}

result<kernel_handle> cuda_device::do_get_kernel(module_handle module, const char* name) {
  context_scope scope(*this);
  CUfunction fn = nullptr;
  if (CUresult r = drv_.module_get_function(&fn, static_cast<CUmodule>(module.native), name);
      r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NOT_FOUND) {
      return status{errc::invalid_argument,
                    std::string("get_kernel: the module has no kernel ") + name};
    }
    return drv_.error("cuModuleGetFunction", r);
  }
  return kernel_handle{fn};
}

status cuda_device::do_launch_kernel(stream_handle stream, kernel_handle kernel, launch_shape shape,
                                     void** params) {
  context_scope scope(*this);
  if (CUresult r = drv_.launch_kernel(static_cast<CUfunction>(kernel.native), shape.blocks, 1, 1,
                                      shape.threads, 1, 1, 0, native(stream), params, nullptr);
      r != CUDA_SUCCESS) {
    return drv_.error("cuLaunchKernel", r);
  }
  return {};
}

}  // namespace strata
