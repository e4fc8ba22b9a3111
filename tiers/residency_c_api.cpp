// The residency manager's C API (strata/residency.h); handles and errors as
// strata/c_extension.hpp describes.
#include <string>

#include "strata/c_extension.hpp"
#include "strata/residency.h"
#include "strata/residency.hpp"

// Its users: the prefetchers over it; destroy refuses while any.
struct strata_residency : strata::c_api::counted_slot<strata::residency_manager> {
  strata_allocator* allocator = nullptr;  // borrowed until this manager is destroyed
};

namespace strata::c_api {

residency_manager* borrow(strata_residency* handle) {
  return borrow_from(handle);
}

void give_back(strata_residency* handle) {
  give_back_to(handle);
}

result<access_mode> access_mode_of(const strata_access_mode& mode) {
  const auto v = enum_value(mode);
  if (v == STRATA_READ_WRITE) return access_mode::read_write;
  if (v == STRATA_READ_ONLY) return access_mode::read_only;
  if (v == STRATA_OVERWRITE) return access_mode::overwrite;
  return status{errc::invalid_argument, "unknown access mode " + std::to_string(v)};
}

}  // namespace strata::c_api

namespace {

static_assert(static_cast<int>(strata::tier::nvme) == STRATA_TIER_NVME &&
              static_cast<int>(strata::buffer_kind::other) == STRATA_BUFFER_OTHER &&
              static_cast<int>(strata::residency_policy::pinned_on_device) ==
                  STRATA_PINNED_ON_DEVICE &&
              static_cast<int>(strata::residency_policy::host_only) == STRATA_HOST_ONLY &&
              static_cast<int>(strata::residency_policy::nvme_home) == STRATA_NVME_HOME);

using strata::c_api::fail;
using strata::c_api::null_output;
using strata::c_api::slot_target;
using strata::c_api::to_c;

strata_status no_manager(strata_residency* r) {
  return fail(strata::errc::invalid_argument, r == nullptr ? "null residency manager handle"
                                                           : "the residency manager was destroyed");
}

// An acquire of either kind: the handle, `out` and `mode` checked, then
// `take(manager, mode)`'s pointer into *out.
template <class Take>
strata_status acquire_into(strata_residency* r, const strata_access_mode& mode, void** out,
                           Take take) {
  auto* impl = slot_target(r);
  if (impl == nullptr) return no_manager(r);
  if (out == nullptr) return null_output();
  auto m = strata::c_api::access_mode_of(mode);
  if (!m) return fail(m.error());
  auto p = take(*impl, *m);
  if (!p) return fail(p.error());
  *out = *p;
  return STRATA_OK;
}

}  // namespace

extern "C" {

strata_status strata_residency_create(strata_allocator* allocator, const char* conf,
                                      strata_residency** out) {
  if (out == nullptr) return null_output();
  strata::allocator* device = strata::c_api::borrow(allocator);
  if (device == nullptr) {
    return fail(strata::errc::invalid_argument,
                allocator == nullptr ? "null allocator handle" : "the allocator was destroyed");
  }
  auto options = strata::c_api::section_of(conf, strata::tier_options_from);
  auto made = options ? strata::residency_manager::create(*device, *options)
                      : strata::result<std::unique_ptr<strata::residency_manager>>(options.error());
  if (!made) {
    strata::c_api::give_back(allocator);
    return fail(made.error());
  }
  auto* handle = strata::c_api::new_handle<strata_residency>(std::move(*made));
  handle->allocator = allocator;
  *out = handle;
  return STRATA_OK;
}

strata_status strata_residency_destroy(strata_residency* r) {
  if (strata::c_api::users_of(r) != 0) {
    return fail(strata::errc::invalid_argument,
                "the residency manager still has a prefetcher: destroy it first");
  }
  if (strata::c_api::take_object(r) == nullptr) return no_manager(r);
  strata::c_api::give_back(r->allocator);
  return STRATA_OK;
}

strata_status strata_residency_register(strata_residency* r, size_t bytes, strata_buffer_kind kind,
                                        strata_residency_policy policy, uint64_t* handle) {
  auto* impl = slot_target(r);
  if (impl == nullptr) return no_manager(r);
  if (handle == nullptr) return null_output();
  const auto k = strata::c_api::enum_value(kind);
  if (k < STRATA_BUFFER_PARAMETER || k > STRATA_BUFFER_OTHER) {
    return fail(strata::errc::invalid_argument, "unknown buffer kind");
  }
  const auto p = strata::c_api::enum_value(policy);
  if (p < STRATA_EVICTABLE || p > STRATA_NVME_HOME) {
    return fail(strata::errc::invalid_argument, "unknown residency policy");
  }
  auto h = impl->register_buffer(bytes, static_cast<strata::buffer_kind>(kind),
                                 static_cast<strata::residency_policy>(policy));
  if (!h) return fail(h.error());
  *handle = *h;
  return STRATA_OK;
}

strata_status strata_residency_acquire(strata_residency* r, uint64_t handle, void* stream,
                                       void** out) {
  return strata_residency_acquire_mode(r, handle, stream, STRATA_READ_WRITE, out);
}

strata_status strata_residency_acquire_mode(strata_residency* r, uint64_t handle, void* stream,
                                            strata_access_mode mode, void** out) {
  return acquire_into(r, mode, out, [&](strata::residency_manager& m, strata::access_mode how) {
    return m.acquire(handle, stream, how);
  });
}

strata_status strata_residency_release(strata_residency* r, uint64_t handle, void* stream) {
  auto* impl = slot_target(r);
  return impl != nullptr ? to_c(impl->release(handle, stream)) : no_manager(r);
}

strata_status strata_residency_acquire_host(strata_residency* r, uint64_t handle,
                                            strata_access_mode mode, void** out) {
  return acquire_into(r, mode, out, [&](strata::residency_manager& m, strata::access_mode how) {
    return m.acquire_host(handle, how);
  });
}

strata_status strata_residency_release_host(strata_residency* r, uint64_t handle) {
  auto* impl = slot_target(r);
  return impl != nullptr ? to_c(impl->release_host(handle)) : no_manager(r);
}

strata_status strata_residency_unregister(strata_residency* r, uint64_t handle) {
  auto* impl = slot_target(r);
  return impl != nullptr ? to_c(impl->unregister(handle)) : no_manager(r);
}

strata_status strata_residency_where(strata_residency* r, uint64_t handle, strata_tier* out) {
  auto* impl = slot_target(r);
  if (impl == nullptr) return no_manager(r);
  if (out == nullptr) return null_output();
  auto t = impl->where(handle);
  if (!t) return fail(t.error());
  *out = static_cast<strata_tier>(*t);
  return STRATA_OK;
}

strata_status strata_residency_stats_json(strata_residency* r, char** out) {
  auto* impl = slot_target(r);
  if (impl == nullptr) return no_manager(r);
  return strata::c_api::copy_out(impl->stats().to_map(), out);
}

}  // extern "C"
