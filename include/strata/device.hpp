// The device layer: the only code in Strata that talks to a GPU driver.
//
// One interface, two implementations:
//   - `sim`:  a GPU emulated in host memory (memfd pages, mmap reservations,
//             one worker thread per stream). Every test runs on it.
//   - `cuda`: the CUDA driver API, loaded at run time with dlopen; the driver
//             is never linked.
// Pick one with `open_device(spec)`; docs/device.md lists every spec key.
//
// Model (the CUDA virtual memory management model):
//   - A *reservation* is a range of virtual addresses with nothing behind it.
//   - A *page run* is physical memory, a multiple of `granularity()` bytes.
//   - `map` puts (part of) a page run behind (part of) a reservation; the
//     mapping is inaccessible until `set_access`. `unmap` must cover whole
//     earlier mappings. One page run may be mapped at several addresses: they
//     alias the same bytes.
//   - Physical memory counts against capacity from `create_pages` until the
//     run is released *and* its last mapping is gone.
//   - Streams run work in FIFO order; events mark a point in a stream; a
//     stream can wait on an event recorded on another stream.
//
// Errors: every fallible call returns `status`/`result<T>`; nothing aborts.
// Common argument checks (zero sizes, granularity multiples, null pointers)
// are done once here in the non-virtual public calls, before the
// implementation sees the call.
//
// Thread safety: every member function of `device` may be called
// concurrently from any thread. Handles (streams, events, page runs) may be
// shared between threads; destroying a handle while another thread still
// uses it is the caller's error, as in CUDA.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "strata/error.hpp"
#include "strata/export.hpp"

namespace strata {

/// A stream: the device's own (from `create_stream`) or a caller's (from
/// `wrap_stream`). For `cuda` `native` is the CUstream; a null `native` is
/// the default (legacy) stream on both devices.
struct stream_handle {
  void* native = nullptr;
  friend bool operator==(stream_handle, stream_handle) = default;
};

/// An event created by `create_event`.
struct event_handle {
  void* native = nullptr;
  friend bool operator==(event_handle, event_handle) = default;
};

/// Physical memory from `create_pages`: `bytes` is a multiple of the
/// granularity; `id` is the driver's handle (CUmemGenericAllocationHandle).
struct page_run {
  std::uint64_t id = 0;
  std::size_t bytes = 0;
  friend bool operator==(page_run, page_run) = default;
};

/// Total and free physical device memory, in bytes.
struct memory_info {
  std::size_t total = 0;
  std::size_t free = 0;
};

enum class copy_direction { host_to_device, device_to_host, device_to_device };

/// Loaded GPU code (`cuda`: a CUmodule) and a kernel in it (a CUfunction).
struct module_handle {
  void* native = nullptr;
};
struct kernel_handle {
  void* native = nullptr;
};
/// A launch's shape: blocks in the grid and threads per block (1-D).
struct launch_shape {
  unsigned blocks = 1;
  unsigned threads = 1;
};

/// A host function run in stream order (see `launch_host_fn`). It must not
/// call into the device.
using host_fn = void (*)(void* arg);

/// A host function of a timing-only device (see `launch_timed_host_fn`):
/// given the modeled time (seconds) its stream reached, it returns the
/// modeled time the stream goes on at (at least `start`). It must not call
/// into the device.
using timed_host_fn = double (*)(void* arg, double start);

/// The driver calls a device counts and times (`device::call_totals`): the
/// virtual memory calls, the event calls, the host's waits for queued work
/// and the pinned host memory calls. These are what an allocator pays on a
/// real GPU (docs/device.md, "What driver calls cost").
enum class driver_call : std::uint8_t {
  reserve,
  free_reservation,
  create_pages,
  release_pages,
  map,
  unmap,
  set_access,
  record_event,
  query_event,
  synchronize_event,
  stream_wait_event,
  synchronize_stream,
  synchronize,
  host_alloc,
  host_free,
};
inline constexpr std::size_t driver_call_kinds = 15;

/// The name of a kind as the stats print it: "map", "set_access", ...
STRATA_API const char* driver_call_name(driver_call kind) noexcept;

/// Calls of one kind and the time they took, in nanoseconds on the calling
/// threads' clocks (`device::host_clock`).
struct driver_call_total {
  std::uint64_t calls = 0;
  std::uint64_t ns = 0;
};
using driver_call_totals = std::array<driver_call_total, driver_call_kinds>;

/// The virtual-memory calls of `totals` (reserve through set_access, the
/// kinds listed first), summed: what backing memory cost. Thread safety:
/// a pure function.
inline driver_call_total memory_call_total(const driver_call_totals& totals) noexcept {
  driver_call_total sum;
  for (std::size_t k = 0; k <= static_cast<std::size_t>(driver_call::set_access); ++k) {
    sum.calls += totals[k].calls;
    sum.ns += totals[k].ns;
  }
  return sum;
}

/// A GPU, real or simulated. Create with `open_device`.
class STRATA_API device {
 public:
  device() = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;
  device(device&&) = delete;
  device& operator=(device&&) = delete;
  /// Drains and destroys the device's own streams, then releases every
  /// reservation, mapping, page run, event and pinned buffer still held.
  virtual ~device();

  /// Short description, e.g. "sim (capacity 80 GiB, granularity 2 MiB)" or
  /// "cuda:0 (NVIDIA H100 80GB HBM3)".
  [[nodiscard]] std::string name() const { return do_name(); }

  /// Size and alignment unit of page runs and mappings, in bytes (a power of
  /// two; 2 MiB on current GPUs).
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }

  /// Total and currently free physical memory of the device.
  result<memory_info> get_memory_info() { return do_get_memory_info(); }

  /// True when device memory is host memory the CPU may read and write
  /// once mapped and accessible (`sim`); false for a real GPU (`cuda`).
  [[nodiscard]] bool memory_is_host() const noexcept { return do_memory_is_host(); }

  /// True for a timing-only device (`sim:...,data=none`, docs/device.md):
  /// capacity and time are modeled, bytes are not kept. Layers that move
  /// data themselves (the `local` communicator) then only take the time.
  [[nodiscard]] bool timing_only() const noexcept { return do_timing_only(); }

  // --- virtual address ranges -------------------------------------------

  /// Reserves `bytes` (a multiple of the granularity) of virtual addresses,
  /// aligned to `alignment` (0 = granularity; else a power of two). Returns
  /// the base address. Errors: invalid_argument, out_of_memory.
  result<std::uintptr_t> reserve(std::size_t bytes, std::size_t alignment = 0);

  /// Frees a whole reservation made by `reserve`. Refused (invalid_argument)
  /// while any part of it is still mapped, or if (base, bytes) is not exactly
  /// one reservation.
  status free_reservation(std::uintptr_t base, std::size_t bytes);

  // --- physical pages -----------------------------------------------------

  /// Creates `bytes` (a multiple of the granularity) of physical memory.
  /// Errors: out_of_memory when the device has no room (state unchanged).
  result<page_run> create_pages(std::size_t bytes);

  /// Releases a page run. Its memory returns to the device once its last
  /// mapping is gone (immediately when it is not mapped).
  status release_pages(page_run run);

  /// Maps the first `bytes` of `run` at `va`. `va` and `bytes` are
  /// granularity multiples, `bytes` at most the run's; [va, va+bytes) lies
  /// in one reservation and overlaps no mapping. The range is inaccessible
  /// until `set_access`. A run maps only from its start: the driver
  /// refused cuMemMap at an offset into a run (CUDA_ERROR_NOT_SUPPORTED on
  /// an H200, driver 580), so one page of a larger run cannot be mapped on
  /// its own elsewhere. Costs one driver call, whatever the size
  /// (bench/RESULTS.md, "the price is per call").
  status map(std::uintptr_t va, std::size_t bytes, page_run run);

  /// Unmaps [va, va+bytes), which must consist of whole earlier mappings.
  /// Does not synchronize: the caller must know no queued work touches it.
  status unmap(std::uintptr_t va, std::size_t bytes);

  /// Makes mapped [va, va+bytes) readable and writable by the device (and,
  /// on `sim`, by the host). Needed after every `map`.
  status set_access(std::uintptr_t va, std::size_t bytes);

  // --- streams and events -------------------------------------------------

  /// Creates a stream owned by the device (non-blocking with respect to the
  /// legacy default stream on `cuda`).
  result<stream_handle> create_stream();

  /// Destroys a stream made by `create_stream`. Work already queued on it
  /// still runs to completion; `sim` waits for it here. Wrapped streams and
  /// the default stream are refused (invalid_argument).
  status destroy_stream(stream_handle stream);

  /// Wraps a caller's native stream handle without taking ownership. On
  /// `sim` the handle must come from this device's `create_stream` (or be
  /// null, the default stream); on `cuda` any CUstream is accepted.
  result<stream_handle> wrap_stream(void* native);

  /// Creates an event (without timing). An event never recorded counts as
  /// complete, as in CUDA.
  result<event_handle> create_event();
  status destroy_event(event_handle event);

  /// Marks the current end of `stream`'s queue. Recording again moves the
  /// mark; `query_event` and waits use the latest record.
  status record_event(event_handle event, stream_handle stream);

  /// Yes when the work before the latest record has finished. Never blocks.
  yes_no query_event(event_handle event);

  /// Blocks until the work before the latest record has finished.
  status synchronize_event(event_handle event);

  /// Work queued on `stream` after this call waits until the work before
  /// `event`'s latest record (at the time of this call) has finished.
  status stream_wait_event(stream_handle stream, event_handle event);

  /// Runs `fn(arg)` on a driver thread once all earlier work on `stream` is
  /// done; later work on the stream waits for it to return.
  status launch_host_fn(stream_handle stream, host_fn fn, void* arg);

  /// Blocks until all work queued on `stream` has finished.
  status synchronize_stream(stream_handle stream);

  /// Makes this device the calling thread's current device, for libraries
  /// that find their device through it (NCCL's ncclCommInitRank, the CUDA
  /// runtime): on `cuda`, cuCtxSetCurrent of the device's primary context
  /// (it stays current until the thread sets another); on `sim`, nothing.
  /// Errors: the driver's.
  status make_current() { return do_make_current(); }

  /// Blocks until all work on every stream of the device has finished.
  status synchronize();

  // --- what the driver costs -----------------------------------------------

  /// The calling thread's clock, in seconds, as this device charges time:
  /// real time on `cuda` and on a `sim` device with data (whose driver
  /// costs are slept, the ones charged but not yet slept included), the
  /// thread's modeled clock on a timing-only device. Only differences
  /// between two readings on one thread mean anything.
  [[nodiscard]] double host_clock() { return do_host_clock(); }

  /// Every driver call of the kinds in `driver_call` made on this device
  /// so far, by any thread: how many, and how long they took on their
  /// threads' `host_clock` (a wait counts the time waited). Cost: one
  /// relaxed load per counter. Thread safety: any thread; the totals are
  /// read one by one, so calls racing with the read may be half counted.
  [[nodiscard]] driver_call_totals call_totals() const noexcept;

  // --- modeled time (timing-only devices) ---------------------------------
  //
  // A timing-only device (`timing_only()`) keeps modeled time instead of
  // sleeping it (docs/device.md, "Modeled time"): each stream has a clock,
  // the time its finished work ends at, and so has each host thread; work
  // starts at the later of its stream's clock and the queuing thread's
  // clock; waits on a stream or an event (synchronize_*) move the waiting
  // thread's clock up to what they waited for; a query says done when the
  // event's time is not after the thread's. Every other device answers
  // these calls with not_supported.

  /// The calling thread's modeled clock, in seconds since the device was
  /// opened (0 for a thread that has not waited for anything yet).
  result<double> modeled_clock();

  /// Moves the calling thread's modeled clock up to `seconds` (if it is
  /// behind): for a layer that hands work to another thread, which must
  /// start no earlier than the hand-off, or whose thread waited for
  /// something outside the device (the NVMe tier's modeled I/O). Errors:
  /// invalid_argument (negative or not finite), not_supported.
  status advance_modeled_clock(double seconds);

  /// Queues a kernel's modeled cost on `stream`: the stream is busy for the
  /// longer of `flops` at the device's compute rate and `bytes` at its
  /// memory rate (sim keys `tflops`, `d2d_gbps`; a rate of 0 is instant).
  /// Errors: invalid_argument (negative or not finite), not_supported.
  status queue_modeled_kernel(stream_handle stream, double flops, double bytes);

  /// Runs `fn(arg, start)` in `stream` order on a driver thread, `start`
  /// being the stream's modeled time; the stream goes on at the returned
  /// time. For layers that model their own time (the `local`
  /// communicator's collectives). Errors: invalid_argument (null `fn`),
  /// not_supported.
  status launch_timed_host_fn(stream_handle stream, timed_host_fn fn, void* arg);

  // --- copies -------------------------------------------------------------

  /// Copies `bytes` from `src` to `dst` in `stream` order. Device pointers
  /// must lie in mapped, accessible memory; host pointers may be pageable or
  /// pinned. `bytes == 0` is a no-op. The caller keeps both buffers alive and
  /// untouched until the copy has finished.
  status copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                    stream_handle stream);

  /// Sets `bytes` of device memory at `dst` to the byte `value` (0-255) in
  /// `stream` order (cuMemsetD8Async). `dst` must lie in mapped, accessible
  /// device memory. `bytes == 0` is a no-op. Errors: invalid_argument (null
  /// `dst`, a value above 255, memory that is not the device's), the
  /// driver's.
  status memset_async(void* dst, unsigned value, std::size_t bytes, stream_handle stream);

  // --- GPU code -----------------------------------------------------------

  /// Loads GPU code for this device: a fatbin or cubin image, as
  /// cuModuleLoadData takes it (the image may be freed after the call). The
  /// module stays loaded until the device is destroyed. Errors:
  /// not_supported on `sim` (it runs host code: `launch_host_fn`); the
  /// driver's (invalid_argument for an image it cannot use).
  result<module_handle> load_module(const void* image);
  /// The kernel `name` (an extern "C" __global__ function) of `module`.
  /// Errors: invalid_argument when the module has none of that name.
  result<kernel_handle> get_kernel(module_handle module, const char* name);
  /// Queues `kernel` on `stream`: `shape.blocks` blocks of `shape.threads`
  /// threads, `params` pointing at each argument in order (cuLaunchKernel's
  /// kernelParams; the values are copied at the call). Errors: the driver's.
  status launch_kernel(stream_handle stream, kernel_handle kernel, launch_shape shape,
                       void** params);

  // --- pinned host memory -------------------------------------------------

  /// Allocates `bytes` of page-locked host memory (at least 4 KiB aligned).
  /// Counted as a `host_alloc` driver call: cuMemHostAlloc pins it page by
  /// page.
  result<void*> host_alloc(std::size_t bytes);
  /// Frees memory from `host_alloc`; any other pointer is invalid_argument.
  /// Counted as a `host_free` driver call: cuMemFreeHost may wait for the
  /// whole device.
  status host_free(void* ptr);
  /// Page-locks existing host memory [ptr, ptr+bytes) for fast copies.
  /// Overlapping an existing registration is invalid_argument.
  status host_register(void* ptr, std::size_t bytes);
  /// Undoes `host_register(ptr, ...)`.
  status host_unregister(void* ptr);

 protected:
  /// Implementations set the granularity once, in their constructor.
  void set_granularity(std::size_t bytes) noexcept { granularity_ = bytes; }

  /// The clock `host_clock` reads; by default real (steady) time.
  virtual double do_host_clock();

  /// Modeled time: by default not_supported (a device without it).
  virtual result<double> do_modeled_clock();
  virtual status do_advance_modeled_clock(double seconds);
  virtual status do_queue_modeled_kernel(stream_handle stream, double flops, double bytes);
  virtual status do_launch_timed_host_fn(stream_handle stream, timed_host_fn fn, void* arg);

 private:
  [[nodiscard]] virtual std::string do_name() const = 0;
  virtual result<memory_info> do_get_memory_info() = 0;
  [[nodiscard]] virtual bool do_memory_is_host() const noexcept = 0;
  [[nodiscard]] virtual bool do_timing_only() const noexcept { return false; }
  virtual result<std::uintptr_t> do_reserve(std::size_t bytes, std::size_t alignment) = 0;
  virtual status do_free_reservation(std::uintptr_t base, std::size_t bytes) = 0;
  virtual result<page_run> do_create_pages(std::size_t bytes) = 0;
  virtual status do_release_pages(page_run run) = 0;
  virtual status do_map(std::uintptr_t va, std::size_t bytes, page_run run) = 0;
  virtual status do_unmap(std::uintptr_t va, std::size_t bytes) = 0;
  virtual status do_set_access(std::uintptr_t va, std::size_t bytes) = 0;
  virtual result<stream_handle> do_create_stream() = 0;
  virtual status do_destroy_stream(stream_handle stream) = 0;
  virtual result<stream_handle> do_wrap_stream(void* native) = 0;
  virtual result<event_handle> do_create_event() = 0;
  virtual status do_destroy_event(event_handle event) = 0;
  virtual status do_record_event(event_handle event, stream_handle stream) = 0;
  virtual yes_no do_query_event(event_handle event) = 0;
  virtual status do_synchronize_event(event_handle event) = 0;
  virtual status do_stream_wait_event(stream_handle stream, event_handle event) = 0;
  virtual status do_launch_host_fn(stream_handle stream, host_fn fn, void* arg) = 0;
  virtual status do_synchronize_stream(stream_handle stream) = 0;
  virtual status do_make_current() { return {}; }
  virtual status do_synchronize() = 0;
  virtual status do_copy_async(void* dst, const void* src, std::size_t bytes,
                               copy_direction direction, stream_handle stream) = 0;
  virtual status do_memset_async(void* dst, unsigned char value, std::size_t bytes,
                                 stream_handle stream) = 0;
  virtual result<module_handle> do_load_module(const void* image) = 0;
  virtual result<kernel_handle> do_get_kernel(module_handle module, const char* name) = 0;
  virtual status do_launch_kernel(stream_handle stream, kernel_handle kernel, launch_shape shape,
                                  void** params) = 0;
  virtual result<void*> do_host_alloc(std::size_t bytes) = 0;
  virtual status do_host_free(void* ptr) = 0;
  virtual status do_host_register(void* ptr, std::size_t bytes) = 0;
  virtual status do_host_unregister(void* ptr) = 0;

  [[nodiscard]] status check_granular(const char* what, std::size_t value) const;
  // Runs `call` and counts it as a call of `kind` with its time.
  template <class Call>
  auto counted(driver_call kind, Call call);

  std::size_t granularity_ = 0;
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> calls_{};
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> call_ns_{};
};

/// Opens a device from a spec string:
///   "sim[:key=value,...]"  the simulated GPU (keys in docs/device.md)
///   "cuda[:N]"             CUDA device N (default 0), driver loaded at run time
///   "auto"                 cuda:0 when a driver and a device exist; otherwise
///                          an error naming the `sim` option (no silent fallback)
/// Errors: invalid_argument (malformed spec, unknown key or bad value, named
/// in the message), no_driver, no_device, not_supported (built without the
/// CUDA toolkit), device_error.
/// Thread safety: may be called concurrently.
STRATA_API result<std::unique_ptr<device>> open_device(std::string_view spec);

}  // namespace strata
