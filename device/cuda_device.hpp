// `device` over the CUDA driver API (see cuda_driver). Physical memory comes
// from cuMemCreate (pinned device memory), mapped with cuMemMap and given
// read-write access for this device only.
//
// Every call makes the device's primary context current for its duration
// and restores the caller's context afterwards, so the caller's own context
// choice (a runtime, a framework) is never disturbed.
//
// The device records what it holds (reservations, mappings, page runs, its
// streams and events, pinned buffers and registrations) so that closing it
// gives everything back, as `device` promises; and so that `unmap` of
// several whole mappings becomes one cuMemUnmap per mapping, which is all
// the driver accepts.
//
// Thread safety: as `device`.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "cuda_driver.hpp"
#include "strata/device.hpp"

namespace strata {

class cuda_device final : public device {
 public:
  /// Opens CUDA device `ordinal`. Errors: no_driver, no_device (no device
  /// or ordinal out of range), device_error.
  static result<std::unique_ptr<cuda_device>> open(int ordinal);
  ~cuda_device() override;
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;
  cuda_device(cuda_device&&) = delete;
  cuda_device& operator=(cuda_device&&) = delete;

 private:
  cuda_device(const cuda_driver& driver, int ordinal, CUdevice dev, CUcontext ctx,
              std::size_t granularity, std::string name);

  // Makes the primary context current for one call, then restores the old.
  class context_scope;

  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] bool do_memory_is_host() const noexcept override { return false; }
  result<memory_info> do_get_memory_info() override;
  result<std::uintptr_t> do_reserve(std::size_t bytes, std::size_t alignment) override;
  status do_free_reservation(std::uintptr_t base, std::size_t bytes) override;
  result<page_run> do_create_pages(std::size_t bytes) override;
  status do_release_pages(page_run run) override;
  status do_map(std::uintptr_t va, std::size_t bytes, page_run run) override;
  status do_unmap(std::uintptr_t va, std::size_t bytes) override;
  status do_set_access(std::uintptr_t va, std::size_t bytes) override;
  result<stream_handle> do_create_stream() override;
  status do_destroy_stream(stream_handle stream) override;
  result<stream_handle> do_wrap_stream(void* native) override;
  result<event_handle> do_create_event() override;
  status do_destroy_event(event_handle event) override;
  status do_record_event(event_handle event, stream_handle stream) override;
  yes_no do_query_event(event_handle event) override;
  status do_synchronize_event(event_handle event) override;
  status do_stream_wait_event(stream_handle stream, event_handle event) override;
  status do_launch_host_fn(stream_handle stream, host_fn fn, void* arg) override;
  status do_make_current() override;
  status do_synchronize_stream(stream_handle stream) override;
  status do_synchronize() override;
  status do_copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                       stream_handle stream) override;
  status do_memset_async(void* dst, unsigned char value, std::size_t bytes,
                         stream_handle stream) override;
  result<void*> do_host_alloc(std::size_t bytes) override;
  status do_host_free(void* ptr) override;
  status do_host_register(void* ptr, std::size_t bytes) override;
  status do_host_unregister(void* ptr) override;
  result<module_handle> do_load_module(const void* image) override;
  result<kernel_handle> do_get_kernel(module_handle module, const char* name) override;
  status do_launch_kernel(stream_handle stream, kernel_handle kernel, launch_shape shape,
                          void** params) override;

  const cuda_driver& drv_;
  int ordinal_;
  CUdevice dev_;
  CUcontext ctx_;
  std::string name_;
  // Unmaps every recorded mapping inside [va, va+bytes), one driver call
  // each. Needs the primary context current.
  status unmap_recorded(std::uintptr_t va, std::size_t bytes);
  // [va, va+bytes) lies inside one of reservations_ (needs mu_).
  [[nodiscard]] bool reserved_here(std::uintptr_t va, std::size_t bytes) const;

  std::mutex mu_;  // guards everything below
  std::unordered_set<void*> owned_streams_;
  std::unordered_set<void*> events_;
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  std::map<std::uintptr_t, std::size_t> mappings_;      // address -> bytes
  std::unordered_set<std::uint64_t> page_runs_;         // not yet released
  std::unordered_set<void*> host_buffers_;
  std::unordered_set<void*> registrations_;
  std::unordered_set<void*> modules_;  // unloaded with the device
};

}  // namespace strata
