// The gradient buckets' C API (strata/gradients.h); handles and errors as
// strata/c_extension.hpp describes. A handle owns its buckets and borrows
// its communicator until destroyed.
#include <atomic>
#include <vector>

#include "strata/c_extension.hpp"
#include "strata/gradient_buckets.hpp"
#include "strata/gradients.h"

struct strata_gradient_buckets {
  std::atomic<strata::gradient_buckets*> impl{nullptr};
  strata_comm* comm = nullptr;  // borrowed until these buckets are destroyed
};

namespace {

using strata::c_api::fail;
using strata::c_api::null_output;
using strata::c_api::slot_target;
using strata::c_api::to_c;

strata_status no_buckets(strata_gradient_buckets* b) {
  return fail(strata::errc::invalid_argument, b == nullptr ? "null gradient buckets handle"
                                                           : "the gradient buckets were destroyed");
}

strata::result<std::unique_ptr<strata::gradient_buckets>> make(strata::communicator& comm,
                                                               const strata_gradient_param* params,
                                                               std::size_t n, void* comm_stream,
                                                               const char* conf) {
  std::vector<strata::gradient_param> ps;
  for (std::size_t p = 0; p < n; ++p) {
    auto t = strata::c_api::dtype_of(params[p].type);
    if (!t) return t.error();
    ps.push_back({params[p].count, *t});
  }
  auto options = strata::c_api::section_of(conf, strata::bucket_options_from);
  if (!options) return options.error();
  return strata::gradient_buckets::create(comm, ps, strata::stream_handle{comm_stream}, *options);
}

}  // namespace

extern "C" {

strata_status strata_gradient_buckets_create(strata_comm* comm, const strata_gradient_param* params,
                                             size_t n, void* comm_stream, const char* conf,
                                             strata_gradient_buckets** out) {
  if (out == nullptr) return null_output();
  if (params == nullptr && n > 0) {
    return fail(strata::errc::invalid_argument, "null parameter list");
  }
  strata::communicator* c = strata::c_api::borrow(comm);
  if (c == nullptr) return fail(strata::errc::invalid_argument, "null or destroyed communicator");
  auto made = make(*c, params, n, comm_stream, conf);
  if (!made) {
    strata::c_api::give_back(comm);
    return fail(made.error());
  }
  auto* handle = strata::c_api::new_handle<strata_gradient_buckets>(std::move(*made));
  handle->comm = comm;
  *out = handle;
  return STRATA_OK;
}

strata_status strata_gradient_buckets_destroy(strata_gradient_buckets* b) {
  if (strata::c_api::take_object(b) == nullptr) return no_buckets(b);
  strata::c_api::give_back(b->comm);
  return STRATA_OK;
}

strata_status strata_gradient_buckets_grad(strata_gradient_buckets* b, size_t p, void** out) {
  strata::gradient_buckets* impl = slot_target(b);
  if (impl == nullptr) return no_buckets(b);
  if (out == nullptr) return null_output();
  void* g = impl->grad(p);
  if (g == nullptr) return fail(strata::errc::invalid_argument, "unknown parameter");
  *out = g;
  return STRATA_OK;
}

strata_status strata_gradient_buckets_zero(strata_gradient_buckets* b, void* stream) {
  strata::gradient_buckets* impl = slot_target(b);
  return impl != nullptr ? to_c(impl->zero(strata::stream_handle{stream})) : no_buckets(b);
}

strata_status strata_gradient_buckets_mark_ready(strata_gradient_buckets* b, size_t p,
                                                 void* producer) {
  strata::gradient_buckets* impl = slot_target(b);
  return impl != nullptr ? to_c(impl->mark_ready(p, strata::stream_handle{producer}))
                         : no_buckets(b);
}

strata_status strata_gradient_buckets_finish(strata_gradient_buckets* b, void* consumer) {
  strata::gradient_buckets* impl = slot_target(b);
  return impl != nullptr ? to_c(impl->finish(strata::stream_handle{consumer})) : no_buckets(b);
}

strata_status strata_gradient_buckets_no_sync(strata_gradient_buckets* b, int on) {
  strata::gradient_buckets* impl = slot_target(b);
  if (impl == nullptr) return no_buckets(b);
  impl->no_sync(on != 0);
  return STRATA_OK;
}

strata_status strata_gradient_buckets_stats_json(strata_gradient_buckets* b, char** out) {
  strata::gradient_buckets* impl = slot_target(b);
  if (impl == nullptr) return no_buckets(b);
  return strata::c_api::copy_out(impl->stats().to_map(), out);
}

}  // extern "C"
