// strata/kernels.h over strata/kernels.hpp. A handle is a slot (see
// strata/c_extension.hpp) holding the pool, and the stream kernels over the
// borrowed allocator's device when one was given.
#include <atomic>
#include <memory>
#include <string>

#include "strata/c_extension.hpp"
#include "strata/kernels.h"
#include "strata/kernels.hpp"

struct strata_kernels {
  struct state {
    std::unique_ptr<strata::kernel_pool> pool;
    strata::allocator* alloc = nullptr;               // borrowed; null without one
    std::unique_ptr<strata::stream_kernels> streams;  // null without an allocator
  };
  std::atomic<state*> impl{nullptr};
  strata_allocator* allocator = nullptr;
};

namespace strata::c_api {

result<dtype> dtype_of(const strata_dtype& type) {
  const auto v = enum_value(type);
  if (v == STRATA_F32) return dtype::f32;
  if (v == STRATA_BF16) return dtype::bf16;
  if (v == STRATA_F16) return dtype::f16;
  return status{errc::invalid_argument, "unknown dtype " + std::to_string(v)};
}

}  // namespace strata::c_api

namespace {

using strata::c_api::fail;
using strata::c_api::slot_target;
using strata::c_api::to_c;

strata_status no_handle(strata_kernels* k) {
  return fail(strata::errc::invalid_argument,
              k == nullptr ? "null kernels handle" : "the kernels handle was destroyed");
}

strata::adam_tensors tensors_of(const strata_adam_tensors& t) {
  return {t.params,
          t.grads,
          static_cast<strata::dtype>(t.grad_type),
          t.exp_avg,
          t.exp_avg_sq,
          t.max_exp_avg_sq,
          t.params_out,
          static_cast<strata::dtype>(t.out_type),
          t.count};
}

strata::adam_options options_of(const strata_adam_options& o) {
  strata::adam_options out;
  out.lr = o.lr;
  out.beta1 = o.beta1;
  out.beta2 = o.beta2;
  out.eps = o.eps;
  out.weight_decay = o.weight_decay;
  out.decoupled_weight_decay = o.decoupled_weight_decay != 0;
  out.maximize = o.maximize != 0;
  out.amsgrad = o.amsgrad != 0;
  return out;
}

// By reference: copying an enum outside its range is already undefined.
bool known(const strata_dtype& t) {
  return strata::c_api::dtype_of(t).ok();
}

// Runs `f(state&)` for a live handle; `async` needs the stream kernels.
template <class F>
strata_status with(strata_kernels* k, bool async, F&& f) {
  strata_kernels::state* s = slot_target(k);
  if (s == nullptr) return no_handle(k);
  if (async && s->streams == nullptr) {
    return fail(strata::errc::invalid_argument,
                "this kernels handle was made without an allocator: only the _host forms run");
  }
  return to_c(std::forward<F>(f)(*s));
}

}  // namespace

strata_adam_options strata_adam_defaults(void) {
  const strata::adam_options d;
  return {d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, 0, 0, 0};
}

strata_status strata_kernels_create(strata_allocator* allocator, unsigned threads,
                                    strata_kernels** out) {
  if (out == nullptr) return strata::c_api::null_output();
  strata::allocator* a = nullptr;
  if (allocator != nullptr) {
    a = strata::c_api::borrow(allocator);
    if (a == nullptr) return fail(strata::errc::invalid_argument, "the allocator was destroyed");
  }
  auto pool = strata::kernel_pool::create(threads);
  if (!pool) {
    if (a != nullptr) strata::c_api::give_back(allocator);
    return fail(pool.error());
  }
  auto s = std::make_unique<strata_kernels::state>();
  s->pool = std::move(*pool);
  s->alloc = a;
  if (a != nullptr) s->streams = std::make_unique<strata::stream_kernels>(a->dev(), *s->pool);
  auto* handle = strata::c_api::new_handle<strata_kernels>(std::move(s));
  handle->allocator = allocator;
  *out = handle;
  return STRATA_OK;
}

strata_status strata_kernels_destroy(strata_kernels* k) {
  const std::unique_ptr<strata_kernels::state> s = strata::c_api::take_object(k);
  if (s == nullptr) return no_handle(k);
  // Kernels still queued on `sim` run on this pool: let them finish first.
  const strata::status drained =
      s->alloc != nullptr ? s->alloc->dev().synchronize() : strata::status{};
  s->streams.reset();
  s->pool.reset();
  if (k->allocator != nullptr) strata::c_api::give_back(k->allocator);
  return to_c(drained);
}

strata_status strata_adam_step_host(strata_kernels* k, const strata_adam_tensors* t,
                                    const strata_adam_options* o, uint64_t step) {
  if (t == nullptr || o == nullptr || !known(t->grad_type) || !known(t->out_type)) {
    return fail(strata::errc::invalid_argument, "adam_step: null tensors/options or bad dtype");
  }
  return with(k, false, [&](strata_kernels::state& s) {
    return strata::adam_step_host(*s.pool, tensors_of(*t), options_of(*o), step);
  });
}

strata_status strata_adam_step_async(strata_kernels* k, void* stream, const strata_adam_tensors* t,
                                     const strata_adam_options* o, uint64_t step) {
  if (t == nullptr || o == nullptr || !known(t->grad_type) || !known(t->out_type)) {
    return fail(strata::errc::invalid_argument, "adam_step: null tensors/options or bad dtype");
  }
  return with(k, true, [&](strata_kernels::state& s) {
    return s.streams->adam_step({stream}, tensors_of(*t), options_of(*o), step);
  });
}

strata_status strata_cast_copy_host(strata_kernels* k, void* dst, strata_dtype to, const void* src,
                                    strata_dtype from, size_t count) {
  if (!known(to) || !known(from))
    return fail(strata::errc::invalid_argument, "cast_copy: bad dtype");
  return with(k, false, [&](strata_kernels::state& s) {
    return strata::cast_copy_host(*s.pool, dst, static_cast<strata::dtype>(to), src,
                                  static_cast<strata::dtype>(from), count);
  });
}

strata_status strata_cast_copy_async(strata_kernels* k, void* stream, void* dst, strata_dtype to,
                                     const void* src, strata_dtype from, size_t count) {
  if (!known(to) || !known(from))
    return fail(strata::errc::invalid_argument, "cast_copy: bad dtype");
  return with(k, true, [&](strata_kernels::state& s) {
    return s.streams->cast_copy({stream}, dst, static_cast<strata::dtype>(to), src,
                                static_cast<strata::dtype>(from), count);
  });
}

// strata_pack_entry and strata::pack_entry have the same members in the
// same order.
static_assert(sizeof(strata_pack_entry) == sizeof(strata::pack_entry));

namespace {

const strata::pack_entry* entries_of(const strata_pack_entry* e) {
  return reinterpret_cast<const strata::pack_entry*>(e);
}

}  // namespace

strata_status strata_pack_host(strata_kernels* k, const strata_pack_entry* entries, size_t n,
                               void* flat, size_t flat_bytes) {
  return with(k, false, [&](strata_kernels::state& s) {
    return strata::pack_host(*s.pool, entries_of(entries), n, flat, flat_bytes);
  });
}

strata_status strata_pack_async(strata_kernels* k, void* stream, const strata_pack_entry* entries,
                                size_t n, void* flat, size_t flat_bytes) {
  return with(k, true, [&](strata_kernels::state& s) {
    return s.streams->pack({stream}, entries_of(entries), n, flat, flat_bytes);
  });
}

strata_status strata_unpack_host(strata_kernels* k, const strata_pack_entry* entries, size_t n,
                                 const void* flat, size_t flat_bytes) {
  return with(k, false, [&](strata_kernels::state& s) {
    return strata::unpack_host(*s.pool, entries_of(entries), n, flat, flat_bytes);
  });
}

strata_status strata_unpack_async(strata_kernels* k, void* stream, const strata_pack_entry* entries,
                                  size_t n, const void* flat, size_t flat_bytes) {
  return with(k, true, [&](strata_kernels::state& s) {
    return s.streams->unpack({stream}, entries_of(entries), n, flat, flat_bytes);
  });
}

strata_status strata_scale_host(strata_kernels* k, float* x, float a, size_t count) {
  return with(k, false,
              [&](strata_kernels::state& s) { return strata::scale_host(*s.pool, x, a, count); });
}

strata_status strata_scale_async(strata_kernels* k, void* stream, float* x, float a, size_t count) {
  return with(k, true,
              [&](strata_kernels::state& s) { return s.streams->scale({stream}, x, a, count); });
}

strata_status strata_axpy_host(strata_kernels* k, float* y, float a, const float* x, size_t count) {
  return with(k, false,
              [&](strata_kernels::state& s) { return strata::axpy_host(*s.pool, y, a, x, count); });
}

strata_status strata_axpy_async(strata_kernels* k, void* stream, float* y, float a, const float* x,
                                size_t count) {
  return with(k, true,
              [&](strata_kernels::state& s) { return s.streams->axpy({stream}, y, a, x, count); });
}
