// The communicators' C API (strata/collectives.h); handles and errors as
// strata/c_extension.hpp describes. A handle owns its communicator and
// borrows its allocator until destroyed.
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "strata/c_extension.hpp"
#include "strata/collectives.h"
#include "strata/communicator.hpp"
#include "strata/nccl.hpp"

// Its users: the gradient buckets and prefetchers over it.
struct strata_comm : strata::c_api::counted_slot<strata::communicator> {
  strata_allocator* allocator = nullptr;  // borrowed until this communicator is destroyed
  strata::allocator* owner = nullptr;     // the allocator behind it, alive as long
};

namespace strata::c_api {

communicator* borrow(strata_comm* handle) {
  return borrow_from(handle);
}

void give_back(strata_comm* handle) {
  give_back_to(handle);
}

}  // namespace strata::c_api

namespace {

static_assert(static_cast<int>(strata::reduce_op::avg) == STRATA_REDUCE_AVG);

using strata::c_api::fail;
using strata::c_api::null_output;
using strata::c_api::slot_target;
using strata::c_api::to_c;

strata_status no_comm(strata_comm* c) {
  return fail(strata::errc::invalid_argument,
              c == nullptr ? "null communicator handle" : "the communicator was destroyed");
}

strata::result<strata::reduce_op> op_of(const strata_reduce_op& op) {
  const auto v = strata::c_api::enum_value(op);
  if (v == STRATA_REDUCE_SUM) return strata::reduce_op::sum;
  if (v == STRATA_REDUCE_AVG) return strata::reduce_op::avg;
  return strata::status{strata::errc::invalid_argument, "unknown reduce op " + std::to_string(v)};
}

strata_comm* wrap(std::unique_ptr<strata::communicator> c, strata_allocator* allocator) {
  auto* handle = strata::c_api::new_handle<strata_comm>(std::move(c));
  handle->allocator = allocator;
  // The caller's borrow keeps it alive until strata_comm_destroy: look the
  // allocator up once (a borrow ended at once changes no count).
  handle->owner = strata::c_api::borrow(allocator);
  if (handle->owner != nullptr) strata::c_api::give_back(allocator);
  return handle;
}

// Borrows every allocator, or none (their devices in `devices`).
strata_status borrow_all(strata_allocator* const* allocators, int n,
                         std::vector<strata::device*>& devices) {
  for (int r = 0; r < n; ++r) {
    strata::allocator* a = strata::c_api::borrow(allocators[r]);
    if (a == nullptr) {
      for (int k = 0; k < r; ++k) strata::c_api::give_back(allocators[k]);
      return fail(strata::status{strata::errc::invalid_argument,
                                 "allocator " + std::to_string(r) + " is null or destroyed"});
    }
    devices.push_back(&a->dev());
  }
  return STRATA_OK;
}

// What a collective reads and writes on this rank, in elements of its
// dtype: `send` and `recv` (a count of 0: the buffer is not used here).
struct extent {
  const char* name;
  const void* send;
  std::size_t send_count;
  const void* recv;
  std::size_t recv_count;
};

// Where a buffer is the communicator's allocator's, it must hold what the
// call touches: a collective past a block's end would overwrite the next
// allocation. Buffers from elsewhere are the caller's to size.
strata::status check_buffers(const strata_comm& c, int rank, const extent& e, strata::dtype t) {
  strata::allocator* a = c.owner;
  if (a == nullptr) return {};
  const std::size_t size = strata::dtype_size(t);
  for (const auto& [which, ptr, count] :
       {std::tuple{"send", e.send, e.send_count}, std::tuple{"recv", e.recv, e.recv_count}}) {
    if (ptr == nullptr || count == 0 || count > SIZE_MAX / size) continue;  // submit() decides
    const auto held = a->live_bytes_from(ptr);
    if (!held || *held >= count * size) continue;
    return {strata::errc::invalid_argument,
            std::string(e.name) + " on rank " + std::to_string(rank) + ": the " + which +
                " buffer " +
                (*held == 0 ? std::string("is not a live allocation of this rank's allocator")
                            : "has " + std::to_string(*held) +
                                  " bytes left in its allocation, and the call touches " +
                                  std::to_string(count * size))};
  }
  return {};
}

// Runs a collective call on a live handle after checking its enums and,
// where they are Strata's, its buffers.
template <class F>
strata_status collective(strata_comm* c, const strata_dtype& type, const extent& e, F&& call) {
  strata::communicator* impl = slot_target(c);
  if (impl == nullptr) return no_comm(c);
  auto t = strata::c_api::dtype_of(type);
  if (!t) return fail(t.error());
  if (auto s = check_buffers(*c, impl->rank(), e, *t); !s) return fail(s);
  return to_c(std::forward<F>(call)(*impl, *t));
}

// count * ranks, or 0 when it overflows (submit() refuses such a count).
std::size_t times_ranks(strata_comm* c, std::size_t count) {
  strata::communicator* impl = slot_target(c);
  const auto n = static_cast<std::size_t>(impl != nullptr ? impl->size() : 1);
  return count > SIZE_MAX / n ? 0 : count * n;
}

}  // namespace

extern "C" {

strata_local_comm_options strata_local_comm_defaults(void) {
  const strata::local_comm_options d;
  return {d.timeout.count(), d.link_gbps, d.latency_us};
}

strata_status strata_comm_create_local(strata_allocator* const* allocators, int n,
                                       const strata_local_comm_options* options,
                                       strata_comm** out) {
  if (out == nullptr || allocators == nullptr) return null_output();
  if (n < 1) return fail(strata::errc::invalid_argument, "at least one rank");
  const strata_local_comm_options o = options != nullptr ? *options : strata_local_comm_defaults();
  std::vector<strata::device*> devices;
  if (auto s = borrow_all(allocators, n, devices); s != STRATA_OK) return s;
  strata::local_comm_options lo;
  lo.timeout = std::chrono::milliseconds(o.timeout_ms);
  lo.link_gbps = o.link_gbps;
  lo.latency_us = o.latency_us;
  auto made = o.timeout_ms > 0
                  ? strata::create_local_communicators(devices, lo)
                  : strata::status{strata::errc::invalid_argument, "timeout_ms must be positive"};
  if (!made) {
    for (int r = 0; r < n; ++r) strata::c_api::give_back(allocators[r]);
    return fail(made.error());
  }
  for (int r = 0; r < n; ++r) {
    out[r] = wrap(std::move((*made)[static_cast<std::size_t>(r)]), allocators[r]);
  }
  return STRATA_OK;
}

strata_status strata_nccl_unique_id(unsigned char id[128]) {
  if (id == nullptr) return null_output();
  auto made = strata::nccl_unique_id();
  if (!made) return fail(made.error());
  std::memcpy(id, made->bytes.data(), made->bytes.size());
  return STRATA_OK;
}

strata_status strata_comm_create_nccl(strata_allocator* allocator, int rank, int size,
                                      const unsigned char id[128], strata_comm** out) {
  if (out == nullptr || id == nullptr) return null_output();
  strata::allocator* a = strata::c_api::borrow(allocator);
  if (a == nullptr) return fail(strata::errc::invalid_argument, "null or destroyed allocator");
  strata::nccl_id nid;
  std::memcpy(nid.bytes.data(), id, nid.bytes.size());
  auto made = strata::create_nccl_communicator(a->dev(), rank, size, nid);
  if (!made) {
    strata::c_api::give_back(allocator);
    return fail(made.error());
  }
  *out = wrap(std::move(*made), allocator);
  return STRATA_OK;
}

strata_status strata_comm_create_nccl_from_env(strata_allocator* allocator, strata_comm** out) {
  if (out == nullptr) return null_output();
  auto env = strata::launcher_env_from_environment();
  if (!env) return fail(env.error());
  strata::allocator* a = strata::c_api::borrow(allocator);
  if (a == nullptr) return fail(strata::errc::invalid_argument, "null or destroyed allocator");
  auto made = strata::create_nccl_communicator(a->dev(), *env);
  if (!made) {
    strata::c_api::give_back(allocator);
    return fail(made.error());
  }
  *out = wrap(std::move(*made), allocator);
  return STRATA_OK;
}

strata_status strata_comm_destroy(strata_comm* c) {
  if (strata::c_api::users_of(c) != 0) {
    return fail(strata::errc::invalid_argument,
                "the communicator is still used by gradient buckets or a prefetcher: destroy "
                "them first");
  }
  if (strata::c_api::take_object(c) == nullptr) return no_comm(c);
  strata::c_api::give_back(c->allocator);
  return STRATA_OK;
}

strata_status strata_comm_rank(strata_comm* c, int* rank) {
  strata::communicator* impl = slot_target(c);
  if (impl == nullptr) return no_comm(c);
  if (rank == nullptr) return null_output();
  *rank = impl->rank();
  return STRATA_OK;
}

strata_status strata_comm_size(strata_comm* c, int* size) {
  strata::communicator* impl = slot_target(c);
  if (impl == nullptr) return no_comm(c);
  if (size == nullptr) return null_output();
  *size = impl->size();
  return STRATA_OK;
}

strata_status strata_comm_all_reduce(strata_comm* c, const void* send, void* recv, size_t count,
                                     strata_dtype type, strata_reduce_op op, void* stream) {
  auto o = op_of(op);
  if (!o) return fail(o.error());
  return collective(c, type, {"all_reduce", send, count, recv, count},
                    [&](strata::communicator& comm, strata::dtype t) {
                      return comm.all_reduce(send, recv, count, t, *o,
                                             strata::stream_handle{stream});
                    });
}

strata_status strata_comm_reduce_scatter(strata_comm* c, const void* send, void* recv,
                                         size_t recv_count, strata_dtype type, strata_reduce_op op,
                                         void* stream) {
  auto o = op_of(op);
  if (!o) return fail(o.error());
  return collective(c, type, {"reduce_scatter", send, times_ranks(c, recv_count), recv, recv_count},
                    [&](strata::communicator& comm, strata::dtype t) {
                      return comm.reduce_scatter(send, recv, recv_count, t, *o,
                                                 strata::stream_handle{stream});
                    });
}

strata_status strata_comm_all_gather(strata_comm* c, const void* send, void* recv,
                                     size_t send_count, strata_dtype type, void* stream) {
  return collective(c, type, {"all_gather", send, send_count, recv, times_ranks(c, send_count)},
                    [&](strata::communicator& comm, strata::dtype t) {
                      return comm.all_gather(send, recv, send_count, t,
                                             strata::stream_handle{stream});
                    });
}

strata_status strata_comm_broadcast(strata_comm* c, const void* send, void* recv, size_t count,
                                    strata_dtype type, int root, void* stream) {
  strata::communicator* impl = slot_target(c);
  const bool sends = impl != nullptr && impl->rank() == root;
  return collective(c, type, {"broadcast", send, sends ? count : 0, recv, count},
                    [&](strata::communicator& comm, strata::dtype t) {
                      return comm.broadcast(send, recv, count, t, root,
                                            strata::stream_handle{stream});
                    });
}

strata_status strata_comm_group_start(strata_comm* c) {
  strata::communicator* impl = slot_target(c);
  return impl != nullptr ? to_c(impl->group_start()) : no_comm(c);
}

strata_status strata_comm_group_end(strata_comm* c) {
  strata::communicator* impl = slot_target(c);
  return impl != nullptr ? to_c(impl->group_end()) : no_comm(c);
}

strata_status strata_comm_register(strata_comm* c, void* ptr, size_t bytes, uint64_t* handle) {
  strata::communicator* impl = slot_target(c);
  if (impl == nullptr) return no_comm(c);
  if (handle == nullptr) return null_output();
  auto h = impl->register_buffer(ptr, bytes);
  if (!h) return fail(h.error());
  *handle = *h;
  return STRATA_OK;
}

strata_status strata_comm_deregister(strata_comm* c, uint64_t handle) {
  strata::communicator* impl = slot_target(c);
  return impl != nullptr ? to_c(impl->deregister_buffer(handle)) : no_comm(c);
}

strata_status strata_comm_async_error(strata_comm* c) {
  strata::communicator* impl = slot_target(c);
  return impl != nullptr ? to_c(impl->async_error()) : no_comm(c);
}

}  // extern "C"
