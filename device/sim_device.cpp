#include "sim_device.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "strata/option_table.hpp"

namespace strata {

namespace {

// Runs `work` (the host's own memmove or memset) inside the modeled time of
// a transfer: the stream is busy `seconds` from the start, or as long as
// `work` takes if that is longer (first-touch page faults take what they
// take).
template <class Work>
void within_modeled_time(double seconds, const Work& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  if (seconds > 0) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::duration<double>(seconds)));
  }
}

// Keeps `s` busy `seconds` of modeled time, from no earlier than
// `not_before` (a timing-only device's copies, memsets and kernels).
void queue_busy(sim_stream& s, double seconds, double not_before) {
  s.enqueue([seconds](double t) { return t + seconds; }, not_before);
}

// A transfer of `seconds`: on a timing-only device modeled time only (the
// work, which would move bytes, is not done); else `work` within that much
// real time.
template <class Work>
void queue_transfer(sim_stream& s, bool timing_only, double not_before, double seconds, Work work) {
  if (timing_only) {
    queue_busy(s, seconds, not_before);
    return;
  }
  s.enqueue([seconds, work](double t) {
    within_modeled_time(seconds, work);
    return t;
  });
}

status invalid(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

const char* fault_key(sim_fault fault) {
  switch (fault) {
    case sim_fault::create_pages:
      return "fail_create_page_after";
    case sim_fault::map:
      return "fail_map_after";
    case sim_fault::copy:
      return "fail_copy_after";
    case sim_fault::host_alloc:
      return "fail_host_alloc_after";
  }
  return "?";
}

// True when [a, a+an) and [b, b+bn) overlap.
bool overlaps(std::uintptr_t a, std::size_t an, std::uintptr_t b, std::size_t bn) {
  return a < b + bn && b < a + an;
}

// True when [p, p+n) overlaps any range in `ranges` (base -> bytes).
bool overlaps_any(const std::map<std::uintptr_t, std::size_t>& ranges, std::uintptr_t p,
                  std::size_t n) {
  auto it = ranges.upper_bound(p);
  if (it != ranges.end() && overlaps(p, n, it->first, it->second)) return true;
  return it != ranges.begin() && overlaps(p, n, std::prev(it)->first, std::prev(it)->second);
}

}  // namespace

result<std::unique_ptr<sim_device>> sim_device::create(const sim_config& config) {
  auto memory = sim_memory::create(config.capacity, config.granularity, config.data != "none");
  if (!memory) return memory.error();
  return std::unique_ptr<sim_device>(new sim_device(config, std::move(*memory)));
}

sim_device::sim_device(const sim_config& config, std::unique_ptr<sim_memory> memory)
    : config_(config), memory_(std::move(memory)), default_stream_(new_stream()) {
  set_granularity(config.granularity);
  for (std::size_t i = 0; i < sim_fault_count; ++i) fail_at_[i] = config.fail_after[i];
}

sim_device::~sim_device() {
  // Streams drain first: queued copies may still touch memory and host buffers.
  streams_.clear();
  default_stream_.reset();
  for (const auto& [base, bytes] : host_allocs_) munmap(reinterpret_cast<void*>(base), bytes);
}

void sim_device::arm_fault(sim_fault fault, std::uint64_t successes) {
  const auto i = static_cast<std::size_t>(fault);
  fail_at_[i] = calls_[i].load() + successes;
}

status sim_device::count_call(sim_fault fault, const char* what) {
  const auto i = static_cast<std::size_t>(fault);
  const std::uint64_t n = calls_[i].fetch_add(1);
  if (n != fail_at_[i].load()) return {};
  return {errc::injected_fault, std::string(what) + ": injected fault (" + fault_key(fault) +
                                    "), call " + std::to_string(n + 1) + " failed"};
}

std::string sim_device::do_name() const {
  return "sim (capacity " + format_bytes(config_.capacity) + ", granularity " +
         format_bytes(config_.granularity) + (config_.data == "none" ? ", timing only" : "") + ")";
}

result<memory_info> sim_device::do_get_memory_info() {
  return memory_->info();
}

result<std::uintptr_t> sim_device::do_reserve(std::size_t bytes, std::size_t alignment) {
  return memory_->reserve(bytes, alignment);
}

status sim_device::do_free_reservation(std::uintptr_t base, std::size_t bytes) {
  return memory_->free_reservation(base, bytes);
}

result<page_run> sim_device::do_create_pages(std::size_t bytes) {
  if (auto s = count_call(sim_fault::create_pages, "create_pages"); !s) return s;
  auto run = memory_->create_pages(bytes);
  if (run) charge(config_.create_us, 1, config_.create_page_us, bytes);
  return run;
}

status sim_device::do_release_pages(page_run run) {
  auto s = memory_->release_pages(run);
  if (s) charge(config_.release_us, 1, config_.release_page_us, run.bytes);
  return s;
}

status sim_device::do_map(std::uintptr_t va, std::size_t bytes, page_run run) {
  if (auto s = count_call(sim_fault::map, "map"); !s) return s;
  auto s = memory_->map(va, bytes, run);
  if (s) charge(config_.map_us, 1, 0, bytes);
  return s;
}

status sim_device::do_unmap(std::uintptr_t va, std::size_t bytes) {
  auto mappings = memory_->unmap(va, bytes);
  if (!mappings) return mappings.error();
  charge(config_.unmap_us, *mappings, 0, bytes);
  return {};
}

status sim_device::do_set_access(std::uintptr_t va, std::size_t bytes) {
  auto mappings = memory_->set_access(va, bytes);
  if (!mappings) return mappings.error();
  charge(config_.set_access_us, *mappings, config_.set_access_page_us, bytes);
  return {};
}

std::shared_ptr<sim_stream> sim_device::new_stream() const {
  // A timing-only device models the lag in not_before(); one with data
  // holds each operation back in real time.
  const auto lag = std::chrono::microseconds(timing_only() ? 0 : config_.gpu_lag_us);
  return std::make_shared<sim_stream>(std::chrono::microseconds(config_.op_delay_us), lag);
}

result<stream_handle> sim_device::do_create_stream() {
  auto stream = new_stream();
  void* native = stream.get();
  std::lock_guard lock(mu_);
  streams_.emplace(native, std::move(stream));
  return stream_handle{native};
}

status sim_device::do_destroy_stream(stream_handle stream) {
  std::shared_ptr<sim_stream> doomed;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(stream.native);
    if (it == streams_.end()) {
      return invalid("destroy_stream: the stream was not created by this device");
    }
    doomed = std::move(it->second);
    streams_.erase(it);
  }
  doomed.reset();  // drains the queue and joins the worker, outside the lock
  return {};
}

result<stream_handle> sim_device::do_wrap_stream(void* native) {
  auto s = find_stream(stream_handle{native}, "wrap_stream");
  if (!s) return s.error();
  return stream_handle{native};
}

result<std::shared_ptr<sim_stream>> sim_device::find_stream(stream_handle stream,
                                                            const char* what) {
  std::lock_guard lock(mu_);
  if (stream.native == nullptr) return default_stream_;
  auto it = streams_.find(stream.native);
  if (it != streams_.end()) return it->second;
  if (config_.adopt_streams) {
    auto adopted = new_stream();
    streams_.emplace(stream.native, adopted);
    return adopted;
  }
  return invalid(std::string(what) + ": unknown stream (not created by this sim device)");
}

result<event_handle> sim_device::do_create_event() {
  auto event = std::make_shared<sim_event>();
  void* native = event.get();
  std::lock_guard lock(mu_);
  events_.emplace(native, std::move(event));
  return event_handle{native};
}

status sim_device::do_destroy_event(event_handle event) {
  std::lock_guard lock(mu_);
  if (events_.erase(event.native) == 0) {
    return invalid("destroy_event: the event was not created by this device");
  }
  return {};
}

result<std::shared_ptr<sim_event>> sim_device::find_event(event_handle event, const char* what) {
  std::lock_guard lock(mu_);
  auto it = events_.find(event.native);
  if (it == events_.end()) {
    return invalid(std::string(what) + ": unknown event (not created by this device)");
  }
  return it->second;
}

status sim_device::do_record_event(event_handle event, stream_handle stream) {
  auto e = find_event(event, "record_event");
  if (!e) return e.error();
  auto s = find_stream(stream, "record_event");
  if (!s) return s.error();
  (*s)->enqueue(
      [mark = (*e)->record()](double t) {
        mark->complete(t);
        return t;
      },
      not_before());
  charge(config_.record_event_us, 1, 0, 0);
  return {};
}

yes_no sim_device::do_query_event(event_handle event) {
  auto e = find_event(event, "query_event");
  if (!e) return e.error();
  charge(config_.query_event_us, 1, 0, 0);
  auto mark = (*e)->latest();
  if (mark == nullptr) return yes_no{true};
  if (timing_only()) {
    // Modeled time decides, not how far the stream's thread has got: done
    // when the event's time is not after the host's. The thread is waited
    // for (it takes no real time) so that the answer does not depend on
    // scheduling: the same run gives the same times.
    return yes_no{mark->wait() <= thread_clock()};
  }
  return yes_no{mark->done()};
}

status sim_device::do_synchronize_event(event_handle event) {
  auto e = find_event(event, "synchronize_event");
  if (!e) return e.error();
  if (auto mark = (*e)->latest()) host_reached(mark->wait());
  return {};
}

status sim_device::do_stream_wait_event(stream_handle stream, event_handle event) {
  auto e = find_event(event, "stream_wait_event");
  if (!e) return e.error();
  auto s = find_stream(stream, "stream_wait_event");
  if (!s) return s.error();
  if (auto mark = (*e)->latest()) {
    (*s)->enqueue([mark](double t) { return std::max(t, mark->wait()); }, not_before());
  }
  return {};
}

status sim_device::do_launch_host_fn(stream_handle stream, host_fn fn, void* arg) {
  auto s = find_stream(stream, "launch_host_fn");
  if (!s) return s.error();
  (*s)->enqueue(
      [fn, arg](double t) {
        fn(arg);
        return t;
      },
      not_before());
  return {};
}

status sim_device::do_synchronize_stream(stream_handle stream) {
  auto s = find_stream(stream, "synchronize_stream");
  if (!s) return s.error();
  host_reached((*s)->synchronize());
  return {};
}

status sim_device::do_synchronize() {
  std::vector<std::shared_ptr<sim_stream>> all;
  {
    std::lock_guard lock(mu_);
    all.reserve(streams_.size() + 1);
    all.push_back(default_stream_);
    for (const auto& [native, stream] : streams_) all.push_back(stream);
  }
  for (const auto& stream : all) host_reached(stream->synchronize());
  return {};
}

double sim_device::copy_seconds(std::size_t bytes, copy_direction direction) const {
  double gbps = config_.d2d_gbps;
  if (direction == copy_direction::host_to_device) gbps = config_.h2d_gbps;
  if (direction == copy_direction::device_to_host) gbps = config_.d2h_gbps;
  const double transfer = gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e9) : 0.0;
  return transfer + static_cast<double>(config_.copy_latency_us) * 1e-6;
}

status sim_device::do_copy_async(void* dst, const void* src, std::size_t bytes,
                                 copy_direction direction, stream_handle stream) {
  if (direction != copy_direction::host_to_device) {
    if (auto s = memory_->check_accessible(src, bytes, "copy_async source"); !s) return s;
  }
  if (direction != copy_direction::device_to_host) {
    if (auto s = memory_->check_accessible(dst, bytes, "copy_async destination"); !s) return s;
  }
  auto s = find_stream(stream, "copy_async");
  if (!s) return s.error();
  if (auto f = count_call(sim_fault::copy, "copy_async"); !f) return f;
  queue_transfer(**s, timing_only(), not_before(), copy_seconds(bytes, direction),
                 [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return {};
}

status sim_device::do_memset_async(void* dst, unsigned char value, std::size_t bytes,
                                   stream_handle stream) {
  if (auto s = memory_->check_accessible(dst, bytes, "memset_async destination"); !s) return s;
  auto s = find_stream(stream, "memset_async");
  if (!s) return s.error();
  // Modeled as a device-to-device copy of the same size.
  queue_transfer(**s, timing_only(), not_before(),
                 copy_seconds(bytes, copy_direction::device_to_device),
                 [dst, value, bytes] { std::memset(dst, value, bytes); });
  return {};
}

status sim_device::do_queue_modeled_kernel(stream_handle stream, double flops, double bytes) {
  if (!timing_only()) return device::do_queue_modeled_kernel(stream, flops, bytes);
  auto s = find_stream(stream, "queue_modeled_kernel");
  if (!s) return s.error();
  const double compute = config_.tflops > 0 ? flops / (config_.tflops * 1e12) : 0.0;
  const double memory = config_.d2d_gbps > 0 ? bytes / (config_.d2d_gbps * 1e9) : 0.0;
  queue_busy(**s, std::max(compute, memory), not_before());
  return {};
}

status sim_device::do_launch_timed_host_fn(stream_handle stream, timed_host_fn fn, void* arg) {
  if (!timing_only()) return device::do_launch_timed_host_fn(stream, fn, arg);
  auto s = find_stream(stream, "launch_timed_host_fn");
  if (!s) return s.error();
  (*s)->enqueue([fn, arg](double t) { return std::max(t, fn(arg, t)); }, not_before());
  return {};
}

result<void*> sim_device::do_host_alloc(std::size_t bytes) {
  if (auto s = count_call(sim_fault::host_alloc, "host_alloc"); !s) return s;
  // Timing only: the memory is address space that copies never touch, so
  // it is not counted against the system's commit limit (a plan's host
  // tier may be larger than this machine's memory).
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (timing_only() ? MAP_NORESERVE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    return status{errc::out_of_memory,
                  "host_alloc: cannot allocate " + format_bytes(bytes) + " of host memory"};
  }
  std::lock_guard lock(mu_);
  host_allocs_.emplace(reinterpret_cast<std::uintptr_t>(p), bytes);
  return p;
}

status sim_device::do_host_free(void* ptr) {
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    auto it = host_allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == host_allocs_.end()) {
      return invalid("host_free: pointer was not returned by host_alloc of this device");
    }
    bytes = it->second;
    host_allocs_.erase(it);
  }
  munmap(ptr, bytes);
  return {};
}

status sim_device::do_host_register(void* ptr, std::size_t bytes) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  if (overlaps_any(registrations_, p, bytes) || overlaps_any(host_allocs_, p, bytes)) {
    return invalid("host_register: the range overlaps memory that is already pinned");
  }
  registrations_.emplace(p, bytes);
  return {};
}

status sim_device::do_host_unregister(void* ptr) {
  std::lock_guard lock(mu_);
  if (registrations_.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
    return invalid("host_unregister: pointer is not the start of a registered range");
  }
  return {};
}

// The sim device runs no GPU code: its kernels are host functions queued
// with launch_host_fn.
result<module_handle> sim_device::do_load_module(const void* /*image*/) {
  return status{errc::not_supported,
                "sim device: no GPU code runs here (queue host functions with launch_host_fn)"};
}

result<kernel_handle> sim_device::do_get_kernel(module_handle /*module*/, const char* /*name*/) {
  return status{errc::invalid_argument, "sim device: get_kernel: no module was loaded"};
}

status sim_device::do_launch_kernel(stream_handle /*stream*/, kernel_handle /*kernel*/,
                                    launch_shape /*shape*/, void** /*params*/) {
  return {errc::invalid_argument, "sim device: launch_kernel: no kernel was loaded"};
}

}  // namespace strata
