// The non-virtual public calls of `device`: argument checks shared by every
// implementation, then the private virtual call.
#include "strata/device.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <string>

namespace strata {

namespace {

status invalid(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

status unknown_direction() {
  return invalid("copy_async: unknown copy direction");
}

}  // namespace

device::~device() = default;

const char* driver_call_name(driver_call kind) noexcept {
  static constexpr std::array<const char*, driver_call_kinds> names{"reserve",
                                                                    "free_reservation",
                                                                    "create_pages",
                                                                    "release_pages",
                                                                    "map",
                                                                    "unmap",
                                                                    "set_access",
                                                                    "record_event",
                                                                    "query_event",
                                                                    "synchronize_event",
                                                                    "stream_wait_event",
                                                                    "synchronize_stream",
                                                                    "synchronize",
                                                                    "host_alloc",
                                                                    "host_free"};
  return names[static_cast<std::size_t>(kind)];
}

double device::do_host_clock() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class Call>
auto device::counted(driver_call kind, Call call) {
  const double start = do_host_clock();
  auto r = call();
  const double took = do_host_clock() - start;
  const auto k = static_cast<std::size_t>(kind);
  calls_[k].fetch_add(1, std::memory_order_relaxed);
  call_ns_[k].fetch_add(took > 0 ? static_cast<std::uint64_t>(std::llround(took * 1e9)) : 0,
                        std::memory_order_relaxed);
  return r;
}

driver_call_totals device::call_totals() const noexcept {
  driver_call_totals out{};
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    out[k].calls = calls_[k].load(std::memory_order_relaxed);
    out[k].ns = call_ns_[k].load(std::memory_order_relaxed);
  }
  return out;
}

status device::check_granular(const char* what, std::size_t value) const {
  if (value % granularity_ != 0) {
    return invalid(std::string(what) + " " + std::to_string(value) +
                   " is not a multiple of the device granularity " + std::to_string(granularity_));
  }
  return {};
}

result<std::uintptr_t> device::reserve(std::size_t bytes, std::size_t alignment) {
  if (bytes == 0) return invalid("reserve: size is 0");
  if (auto s = check_granular("reserve: size", bytes); !s) return s;
  if (alignment == 0) alignment = granularity_;
  if (!std::has_single_bit(alignment)) {
    return invalid("reserve: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (alignment < granularity_) alignment = granularity_;
  return counted(driver_call::reserve, [&] { return do_reserve(bytes, alignment); });
}

status device::free_reservation(std::uintptr_t base, std::size_t bytes) {
  if (base == 0 || bytes == 0) return invalid("free_reservation: null base or zero size");
  return counted(driver_call::free_reservation, [&] { return do_free_reservation(base, bytes); });
}

result<page_run> device::create_pages(std::size_t bytes) {
  if (bytes == 0) return invalid("create_pages: size is 0");
  if (auto s = check_granular("create_pages: size", bytes); !s) return s;
  return counted(driver_call::create_pages, [&] { return do_create_pages(bytes); });
}

status device::release_pages(page_run run) {
  if (run.bytes == 0) return invalid("release_pages: empty page run");
  return counted(driver_call::release_pages, [&] { return do_release_pages(run); });
}

status device::map(std::uintptr_t va, std::size_t bytes, page_run run) {
  if (va == 0 || bytes == 0) return invalid("map: null address or zero size");
  if (auto s = check_granular("map: address", va); !s) return s;
  if (auto s = check_granular("map: size", bytes); !s) return s;
  if (bytes > run.bytes) {
    return invalid("map: size " + std::to_string(bytes) + " exceeds the page run's " +
                   std::to_string(run.bytes) + " bytes");
  }
  return counted(driver_call::map, [&] { return do_map(va, bytes, run); });
}

status device::unmap(std::uintptr_t va, std::size_t bytes) {
  if (va == 0 || bytes == 0) return invalid("unmap: null address or zero size");
  if (auto s = check_granular("unmap: address", va); !s) return s;
  if (auto s = check_granular("unmap: size", bytes); !s) return s;
  return counted(driver_call::unmap, [&] { return do_unmap(va, bytes); });
}

status device::set_access(std::uintptr_t va, std::size_t bytes) {
  if (va == 0 || bytes == 0) return invalid("set_access: null address or zero size");
  if (auto s = check_granular("set_access: address", va); !s) return s;
  if (auto s = check_granular("set_access: size", bytes); !s) return s;
  return counted(driver_call::set_access, [&] { return do_set_access(va, bytes); });
}

result<stream_handle> device::create_stream() {
  return do_create_stream();
}

status device::destroy_stream(stream_handle stream) {
  if (stream.native == nullptr) return invalid("destroy_stream: the default stream is not owned");
  return do_destroy_stream(stream);
}

result<stream_handle> device::wrap_stream(void* native) {
  return do_wrap_stream(native);
}

result<event_handle> device::create_event() {
  return do_create_event();
}

status device::destroy_event(event_handle event) {
  if (event.native == nullptr) return invalid("destroy_event: null event");
  return do_destroy_event(event);
}

status device::record_event(event_handle event, stream_handle stream) {
  if (event.native == nullptr) return invalid("record_event: null event");
  return counted(driver_call::record_event, [&] { return do_record_event(event, stream); });
}

yes_no device::query_event(event_handle event) {
  if (event.native == nullptr) return invalid("query_event: null event");
  return counted(driver_call::query_event, [&] { return do_query_event(event); });
}

status device::synchronize_event(event_handle event) {
  if (event.native == nullptr) return invalid("synchronize_event: null event");
  return counted(driver_call::synchronize_event, [&] { return do_synchronize_event(event); });
}

status device::stream_wait_event(stream_handle stream, event_handle event) {
  if (event.native == nullptr) return invalid("stream_wait_event: null event");
  return counted(driver_call::stream_wait_event,
                 [&] { return do_stream_wait_event(stream, event); });
}

status device::launch_host_fn(stream_handle stream, host_fn fn, void* arg) {
  if (fn == nullptr) return invalid("launch_host_fn: null function");
  return do_launch_host_fn(stream, fn, arg);
}

status device::synchronize_stream(stream_handle stream) {
  return counted(driver_call::synchronize_stream, [&] { return do_synchronize_stream(stream); });
}

status device::synchronize() {
  return counted(driver_call::synchronize, [&] { return do_synchronize(); });
}

result<double> device::modeled_clock() {
  return do_modeled_clock();
}

status device::advance_modeled_clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return invalid("advance_modeled_clock: the time must be finite and not negative");
  }
  return do_advance_modeled_clock(seconds);
}

status device::queue_modeled_kernel(stream_handle stream, double flops, double bytes) {
  if (!std::isfinite(flops) || !std::isfinite(bytes) || flops < 0 || bytes < 0) {
    return invalid("queue_modeled_kernel: FLOPs and bytes must be finite and not negative");
  }
  return do_queue_modeled_kernel(stream, flops, bytes);
}

status device::launch_timed_host_fn(stream_handle stream, timed_host_fn fn, void* arg) {
  if (fn == nullptr) return invalid("launch_timed_host_fn: null function");
  return do_launch_timed_host_fn(stream, fn, arg);
}

namespace {

status no_modeled_time(const std::string& device_name) {
  return {errc::not_supported, device_name +
                                   " keeps no modeled time (only timing-only devices do: "
                                   "sim:...,data=none)"};
}

}  // namespace

result<double> device::do_modeled_clock() {
  return no_modeled_time(name());
}

status device::do_advance_modeled_clock(double /*seconds*/) {
  return no_modeled_time(name());
}

status device::do_queue_modeled_kernel(stream_handle /*stream*/, double /*flops*/,
                                       double /*bytes*/) {
  return no_modeled_time(name());
}

status device::do_launch_timed_host_fn(stream_handle /*stream*/, timed_host_fn /*fn*/,
                                       void* /*arg*/) {
  return no_modeled_time(name());
}

status device::copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                          stream_handle stream) {
  switch (direction) {
    case copy_direction::host_to_device:
    case copy_direction::device_to_host:
    case copy_direction::device_to_device:
      break;
    default:
      return unknown_direction();
  }
  if (bytes == 0) return {};
  if (dst == nullptr || src == nullptr) return invalid("copy_async: null pointer");
  return do_copy_async(dst, src, bytes, direction, stream);
}

status device::memset_async(void* dst, unsigned value, std::size_t bytes, stream_handle stream) {
  if (bytes == 0) return {};
  if (dst == nullptr) return invalid("memset_async: null pointer");
  if (value > 255)
    return invalid("memset_async: value " + std::to_string(value) + " is not a byte");
  return do_memset_async(dst, static_cast<unsigned char>(value), bytes, stream);
}

result<void*> device::host_alloc(std::size_t bytes) {
  if (bytes == 0) return invalid("host_alloc: size is 0");
  return counted(driver_call::host_alloc, [&] { return do_host_alloc(bytes); });
}

status device::host_free(void* ptr) {
  if (ptr == nullptr) return invalid("host_free: null pointer");
  return counted(driver_call::host_free, [&] { return do_host_free(ptr); });
}

status device::host_register(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return invalid("host_register: null pointer or zero size");
  return do_host_register(ptr, bytes);
}

result<module_handle> device::load_module(const void* image) {
  if (image == nullptr) return invalid("load_module: null image");
  return do_load_module(image);
}

result<kernel_handle> device::get_kernel(module_handle module, const char* name) {
  if (module.native == nullptr || name == nullptr)
    return invalid("get_kernel: null module or name");
  return do_get_kernel(module, name);
}

status device::launch_kernel(stream_handle stream, kernel_handle kernel, launch_shape shape,
                             void** params) {
  if (kernel.native == nullptr) return invalid("launch_kernel: null kernel");
  if (shape.blocks == 0 || shape.threads == 0 || shape.threads > 1024) {
    return invalid("launch_kernel: blocks must be at least 1 and threads 1 to 1024");
  }
  return do_launch_kernel(stream, kernel, shape, params);
}

status device::host_unregister(void* ptr) {
  if (ptr == nullptr) return invalid("host_unregister: null pointer");
  return do_host_unregister(ptr);
}

}  // namespace strata
