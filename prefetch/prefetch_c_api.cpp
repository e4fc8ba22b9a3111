// The prefetcher's C API (strata/prefetch.h); handles and errors as
// strata/c_extension.hpp describes.
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "strata/c_extension.hpp"
#include "strata/prefetch.h"
#include "strata/prefetcher.hpp"

struct strata_prefetcher {
  std::atomic<strata::prefetcher*> impl{nullptr};
  strata_residency* residency = nullptr;  // borrowed until this prefetcher is destroyed
  std::mutex mu;
  std::vector<strata_comm*> comms;  // borrowed by add_sharded, until destroyed
};

namespace {

using strata::c_api::fail;
using strata::c_api::null_output;
using strata::c_api::slot_target;
using strata::c_api::to_c;

strata_status no_prefetcher(strata_prefetcher* p) {
  return fail(strata::errc::invalid_argument,
              p == nullptr ? "null prefetcher handle" : "the prefetcher was destroyed");
}

// An acquire of either kind: the handle, `out` and `mode` checked, then
// `take(prefetcher, mode)`'s pointer into *out.
template <class Take>
strata_status acquire_into(strata_prefetcher* p, const strata_access_mode& mode, void** out,
                           Take take) {
  auto* impl = slot_target(p);
  if (impl == nullptr) return no_prefetcher(p);
  if (out == nullptr) return null_output();
  auto m = strata::c_api::access_mode_of(mode);
  if (!m) return fail(m.error());
  auto ptr = take(*impl, *m);
  if (!ptr) return fail(ptr.error());
  *out = *ptr;
  return STRATA_OK;
}

}  // namespace

extern "C" {

strata_status strata_prefetcher_create(strata_residency* residency, const char* conf,
                                       strata_prefetcher** out) {
  if (out == nullptr) return null_output();
  strata::residency_manager* buffers = strata::c_api::borrow(residency);
  if (buffers == nullptr) {
    return fail(strata::errc::invalid_argument, residency == nullptr
                                                    ? "null residency manager handle"
                                                    : "the residency manager was destroyed");
  }
  auto options = strata::c_api::section_of(conf, strata::prefetch_options_from);
  auto made = options ? strata::prefetcher::create(*buffers, *options)
                      : strata::result<std::unique_ptr<strata::prefetcher>>(options.error());
  if (!made) {
    strata::c_api::give_back(residency);
    return fail(made.error());
  }
  auto* handle = strata::c_api::new_handle<strata_prefetcher>(std::move(*made));
  handle->residency = residency;
  *out = handle;
  return STRATA_OK;
}

strata_status strata_prefetcher_destroy(strata_prefetcher* p) {
  if (strata::c_api::take_object(p) == nullptr) return no_prefetcher(p);
  strata::c_api::give_back(p->residency);
  std::lock_guard lock(p->mu);
  for (strata_comm* c : p->comms) strata::c_api::give_back(c);
  p->comms.clear();
  return STRATA_OK;
}

strata_status strata_prefetcher_begin_step(strata_prefetcher* p) {
  auto* impl = slot_target(p);
  return impl != nullptr ? to_c(impl->begin_step()) : no_prefetcher(p);
}

strata_status strata_prefetcher_end_step(strata_prefetcher* p) {
  auto* impl = slot_target(p);
  return impl != nullptr ? to_c(impl->end_step()) : no_prefetcher(p);
}

strata_status strata_prefetcher_acquire(strata_prefetcher* p, uint64_t handle, void* stream,
                                        void** out) {
  return strata_prefetcher_acquire_mode(p, handle, stream, STRATA_READ_WRITE, out);
}

strata_status strata_prefetcher_acquire_mode(strata_prefetcher* p, uint64_t handle, void* stream,
                                             strata_access_mode mode, void** out) {
  return acquire_into(p, mode, out, [&](strata::prefetcher& f, strata::access_mode how) {
    return f.acquire(handle, stream, how);
  });
}

strata_status strata_prefetcher_release(strata_prefetcher* p, uint64_t handle, void* stream) {
  auto* impl = slot_target(p);
  return impl != nullptr ? to_c(impl->release(handle, stream)) : no_prefetcher(p);
}

strata_status strata_prefetcher_acquire_host(strata_prefetcher* p, uint64_t handle,
                                             strata_access_mode mode, void** out) {
  return acquire_into(p, mode, out, [&](strata::prefetcher& f, strata::access_mode how) {
    return f.acquire_host(handle, how);
  });
}

strata_status strata_prefetcher_release_host(strata_prefetcher* p, uint64_t handle) {
  auto* impl = slot_target(p);
  return impl != nullptr ? to_c(impl->release_host(handle)) : no_prefetcher(p);
}

strata_status strata_prefetcher_hint(strata_prefetcher* p, uint64_t handle) {
  auto* impl = slot_target(p);
  return impl != nullptr ? to_c(impl->prefetch(handle)) : no_prefetcher(p);
}

strata_status strata_prefetcher_add_sharded(strata_prefetcher* p, uint64_t handle,
                                            strata_comm* comm, void* comm_stream,
                                            strata_dtype type) {
  auto* impl = slot_target(p);
  if (impl == nullptr) return no_prefetcher(p);
  auto t = strata::c_api::dtype_of(type);
  if (!t) return fail(t.error());
  strata::communicator* c = strata::c_api::borrow(comm);
  if (c == nullptr) return fail(strata::errc::invalid_argument, "null or destroyed communicator");
  if (auto s = impl->add_sharded(handle, *c, strata::stream_handle{comm_stream}, *t); !s) {
    strata::c_api::give_back(comm);
    return fail(s);
  }
  std::lock_guard lock(p->mu);
  p->comms.push_back(comm);
  return STRATA_OK;
}

strata_status strata_prefetcher_stats_json(strata_prefetcher* p, char** out) {
  auto* impl = slot_target(p);
  if (impl == nullptr) return no_prefetcher(p);
  return strata::c_api::copy_out(impl->stats().to_map(), out);
}

}  // extern "C"
