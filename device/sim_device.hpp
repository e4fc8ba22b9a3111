// The simulated GPU: `device` over host memory (see sim_memory) and worker
// threads (see sim_stream). Used by every test and by the CPU-only replay.
//
// What it models: capacity, granularity, VMM aliasing and access rules,
// stream FIFO order, event order, cross-stream waits, asynchronous copies
// with an optional bandwidth/latency model, pinned host memory bookkeeping,
// injected faults and, when timing only, modeled time (see sim_stream) with
// kernels' modeled cost. What it does not model: the legacy default
// stream's implicit synchronization with other streams (every sim stream,
// the default one included, is independent), running GPU code, and sticky
// asynchronous errors (an injected copy fault fails the `copy_async` call
// itself).
//
// Thread safety: as `device`; `arm_fault` may also be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "sim_config.hpp"
#include "sim_memory.hpp"
#include "sim_stream.hpp"
#include "strata/device.hpp"

namespace strata {

class sim_device final : public device {
 public:
  /// Errors: device_error when the host refuses the memfd.
  static result<std::unique_ptr<sim_device>> create(const sim_config& config);
  ~sim_device() override;
  sim_device(const sim_device&) = delete;
  sim_device& operator=(const sim_device&) = delete;
  sim_device(sim_device&&) = delete;
  sim_device& operator=(sim_device&&) = delete;

  /// Makes the call of kind `fault` that comes after `successes` more
  /// successful calls fail, once (replaces any earlier setting).
  void arm_fault(sim_fault fault, std::uint64_t successes);

  [[nodiscard]] const sim_config& config() const noexcept { return config_; }

 private:
  sim_device(const sim_config& config, std::unique_ptr<sim_memory> memory);

  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] bool do_memory_is_host() const noexcept override { return config_.data == "host"; }
  [[nodiscard]] bool do_timing_only() const noexcept override { return config_.data == "none"; }
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
  result<double> do_modeled_clock() override;
  status do_advance_modeled_clock(double seconds) override;
  status do_queue_modeled_kernel(stream_handle stream, double flops, double bytes) override;
  status do_launch_timed_host_fn(stream_handle stream, timed_host_fn fn, void* arg) override;
  double do_host_clock() override;

  // The modeled time work queued now starts no earlier than: the calling
  // thread's clock plus the GPU's lag on a timing-only device (0 otherwise).
  [[nodiscard]] double not_before() const;
  // The calling thread's modeled clock (0 on a device with data).
  [[nodiscard]] double thread_clock() const;
  // Charges the calling thread a driver call of `us_per_unit` microseconds
  // per sim_cost_unit of `bytes` (at least one unit): on its modeled clock
  // when timing only, else slept (in arrears of up to a millisecond, so
  // that short calls do not each pay a sleep's overshoot).
  // Charges `calls` calls at `per_call` microseconds, plus `per_unit` for
  // each 2 MiB of `bytes` beyond one unit a call (a call on less than a
  // unit costs its call).
  void charge(double per_call, std::size_t calls, double per_unit, std::size_t bytes);
  // A new stream of this device.
  [[nodiscard]] std::shared_ptr<sim_stream> new_stream() const;
  // Moves the calling thread's clock up to `t` (a wait saw work end at
  // `t`); nothing on a device with data.
  void host_reached(double t);
  static std::uint64_t new_serial();

  // The stream behind a handle; invalid_argument for an unknown one.
  result<std::shared_ptr<sim_stream>> find_stream(stream_handle stream, const char* what);
  result<std::shared_ptr<sim_event>> find_event(event_handle event, const char* what);
  // Counts a call of kind `fault`; an error if this call is the one to fail.
  status count_call(sim_fault fault, const char* what);
  // Seconds a copy of `bytes` takes under the bandwidth/latency model.
  [[nodiscard]] double copy_seconds(std::size_t bytes, copy_direction direction) const;

  sim_config config_;
  std::unique_ptr<sim_memory> memory_;
  std::array<std::atomic<std::uint64_t>, sim_fault_count> calls_{};
  std::array<std::atomic<std::uint64_t>, sim_fault_count> fail_at_{};
  // Timing only: names this device's entry in each host thread's clocks
  // (modeled seconds; each only grows).
  std::uint64_t serial_ = new_serial();

  std::mutex mu_;  // guards the maps below
  std::shared_ptr<sim_stream> default_stream_;
  std::unordered_map<void*, std::shared_ptr<sim_stream>> streams_;
  std::unordered_map<void*, std::shared_ptr<sim_event>> events_;
  std::map<std::uintptr_t, std::size_t> host_allocs_;    // base -> bytes
  std::map<std::uintptr_t, std::size_t> registrations_;  // base -> bytes
};

}  // namespace strata
