// Streams, events, copies and host functions of the stand-in driver, over
// the sim device's worker threads.
#include <cstring>

#include "fake_driver.hpp"

namespace fakecuda {

namespace {

bool is_default(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// A host-to-host cuMemcpyAsync, run as a host function in stream order.
struct host_copy {
  void* dst;
  const void* src;
  std::size_t bytes;
  static void run(void* arg) {
    auto* c = static_cast<host_copy*>(arg);
    std::memmove(c->dst, c->src, c->bytes);
    delete c;  // NOLINT(cppcoreguidelines-owning-memory): handed over by memcpy_async
  }
};

}  // namespace

fake_driver::gpu* fake_driver::stream_gpu(CUstream stream, strata::stream_handle& out) {
  if (is_default(stream)) {
    out = {};
    return &current();
  }
  std::lock_guard lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return nullptr;
  out = {stream};
  return &gpus_[static_cast<std::size_t>(it->second)];
}

fake_driver::gpu* fake_driver::event_gpu(CUevent event) {
  std::lock_guard lock(mu_);
  auto it = events_.find(event);
  return it == events_.end() ? nullptr : &gpus_[static_cast<std::size_t>(it->second)];
}

bool fake_driver::stream_known(CUstream stream) {
  strata::stream_handle h;
  return stream_gpu(stream, h) != nullptr;
}

CUresult fake_driver::stream_create(CUstream* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto made = current().sim->create_stream();
  if (!made) return to_result(made.error());
  std::lock_guard lock(mu_);
  streams_.emplace(made->native, current_ordinal());
  *stream = static_cast<CUstream>(made->native);
  return CUDA_SUCCESS;
}

CUresult fake_driver::stream_destroy(CUstream stream) {
  strata::stream_handle h;
  gpu* g = is_default(stream) ? nullptr : stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(mu_);
    streams_.erase(stream);
  }
  return to_result(g->sim->destroy_stream(h));  // drains the stream first
}

CUresult fake_driver::stream_synchronize(CUstream stream) {
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return to_result(g->sim->synchronize_stream(h));
}

CUresult fake_driver::stream_wait_event(CUstream stream, CUevent event, unsigned flags) {
  if (flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  gpu* eg = event_gpu(event);
  if (g == nullptr || eg == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (g != eg) return CUDA_ERROR_NOT_SUPPORTED;  // waits across GPUs are not modelled
  return to_result(g->sim->stream_wait_event(h, strata::event_handle{event}));
}

CUresult fake_driver::event_create(CUevent* event, unsigned flags) {
  constexpr unsigned known =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (event == nullptr || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto made = current().sim->create_event();
  if (!made) return to_result(made.error());
  std::lock_guard lock(mu_);
  events_.emplace(made->native, current_ordinal());
  *event = static_cast<CUevent>(made->native);
  return CUDA_SUCCESS;
}

CUresult fake_driver::event_destroy(CUevent event) {
  gpu* g = event_gpu(event);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(mu_);
    events_.erase(event);
  }
  return to_result(g->sim->destroy_event(strata::event_handle{event}));
}

CUresult fake_driver::event_record(CUevent event, CUstream stream) {
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  gpu* eg = event_gpu(event);
  if (g == nullptr || eg == nullptr || g != eg) return CUDA_ERROR_INVALID_HANDLE;
  return to_result(g->sim->record_event(strata::event_handle{event}, h));
}

CUresult fake_driver::event_query(CUevent event) {
  gpu* g = event_gpu(event);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto done = g->sim->query_event(strata::event_handle{event});
  if (!done.ok()) return to_result(done.error());
  return done.yes() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult fake_driver::event_synchronize(CUevent event) {
  gpu* g = event_gpu(event);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return to_result(g->sim->synchronize_event(strata::event_handle{event}));
}

CUresult fake_driver::memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_SUCCESS;
  bool dst_device = false;
  bool src_device = false;
  {
    std::lock_guard lock(mu_);
    dst_device = reservation_of(static_cast<std::uintptr_t>(dst), 1) != nullptr;
    src_device = reservation_of(static_cast<std::uintptr_t>(src), 1) != nullptr;
  }
  auto* d = reinterpret_cast<void*>(dst);
  const auto* s = reinterpret_cast<const void*>(src);
  if (!dst_device && !src_device) {
    auto* c = new host_copy{d, s, bytes};  // NOLINT(cppcoreguidelines-owning-memory)
    const strata::status st = g->sim->launch_host_fn(h, host_copy::run, c);
    if (!st) delete c;  // NOLINT(cppcoreguidelines-owning-memory)
    return to_result(st);
  }
  const strata::copy_direction direction = !src_device   ? strata::copy_direction::host_to_device
                                           : !dst_device ? strata::copy_direction::device_to_host
                                                         : strata::copy_direction::device_to_device;
  return to_result(g->sim->copy_async(d, s, bytes, direction, h));
}

CUresult fake_driver::memset_async(CUdeviceptr dst, unsigned char value, size_t bytes,
                                   CUstream stream) {
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (dst == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_SUCCESS;
  {
    std::lock_guard lock(mu_);
    if (reservation_of(static_cast<std::uintptr_t>(dst), bytes) == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return to_result(g->sim->memset_async(reinterpret_cast<void*>(dst), value, bytes, h));
}

CUresult fake_driver::launch_host_func(CUstream stream, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return to_result(g->sim->launch_host_fn(h, fn, data));
}

}  // namespace fakecuda
