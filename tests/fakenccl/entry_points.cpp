// The NCCL functions Strata calls, and the test controls of fakenccl.h.
// Each checks what NCCL documents (a live communicator, rank and count
// ranges, types and operations, device buffers of the communicator's GPU
// that hold `count` elements, group nesting, registrations of one physical
// allocation: NCCL #1820) before it acts; a failure injected with
// fakenccl_fail_call comes first.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fake_nccl.hpp"
#include "fakecuda.h"
#include "fakenccl.h"

#define FAKENCCL_EXPORT [[gnu::visibility("default")]]

namespace fakenccl {
namespace {

struct injected {
  int rank;
  unsigned long long nth;
  int result;
};

struct state {
  std::mutex mu;
  std::set<ncclComm*> comms;
  std::unordered_map<std::string, injected> failures;
  int version = 0;
  unsigned long long registrations = 0;
};

state& global() {
  static state s;
  return s;
}

// The injected result for this call of `name` by `rank`, or ncclSuccess.
ncclResult_t injected_result(const char* name, int rank) {
  state& s = global();
  std::lock_guard lock(s.mu);
  auto it = s.failures.find(name);
  if (it == s.failures.end() || (it->second.rank >= 0 && it->second.rank != rank)) {
    return ncclSuccess;
  }
  if (--it->second.nth > 0) return ncclSuccess;
  const auto r = static_cast<ncclResult_t>(it->second.result);
  s.failures.erase(it);
  return r;
}

bool live(ncclComm* comm) {
  state& s = global();
  std::lock_guard lock(s.mu);
  return comm != nullptr && s.comms.contains(comm);
}

// A device buffer of the communicator's GPU holding `bytes`.
bool on_device(const ncclComm* comm, const void* p, std::size_t bytes) {
  int ordinal = -1;
  return fakecuda_backing_allocations(reinterpret_cast<std::uintptr_t>(p), bytes, &ordinal) > 0 &&
         ordinal == comm->ordinal;
}

// count * nranks, or 0 when it overflows.
std::size_t times_ranks(ncclComm* comm, std::size_t count) {
  const auto n = static_cast<std::size_t>(live(comm) ? comm->nranks : 1);
  return count > SIZE_MAX / n ? 0 : count * n;
}

struct group_state {
  int depth = 0;
  std::vector<std::pair<ncclComm*, call>> calls;
};
thread_local group_state group;

ncclResult_t collective(const char* name, ncclComm* comm, call c, std::size_t send_elems,
                        std::size_t recv_elems) {
  if (!live(comm)) return fail(nullptr, ncclInvalidArgument, std::string(name) + ": no such comm");
  if (auto r = injected_result(name, comm->rank); r != ncclSuccess) {
    return fail(comm, r, std::string(name) + ": injected failure");
  }
  if (const int e = comm->async_error.load(); e != ncclSuccess) {
    return fail(comm, static_cast<ncclResult_t>(e),
                std::string(name) + ": the communicator has failed: " + last_error(comm));
  }
  if (element_bytes(c.type) == 0) {
    return fail(comm, ncclInvalidArgument,
                std::string(name) + ": the stand-in reduces fp32, fp16 and bf16 only");
  }
  if (c.op != ncclSum && c.op != ncclAvg) {
    return fail(comm, ncclInvalidArgument, std::string(name) + ": the stand-in has sum and avg");
  }
  if (c.root < 0 || c.root >= comm->nranks) {
    return fail(comm, ncclInvalidArgument, std::string(name) + ": root out of range");
  }
  const std::size_t send_bytes = bytes_of(send_elems, c.type);
  const std::size_t recv_bytes = bytes_of(recv_elems, c.type);
  const bool sends = c.what != kind::broadcast || comm->rank == c.root;
  if (c.count == 0) return ncclSuccess;  // NCCL: nothing to do
  if (send_bytes == 0 || recv_bytes == 0) {
    return fail(comm, ncclInvalidArgument, std::string(name) + ": count overflows");
  }
  if ((sends && !on_device(comm, c.send, send_bytes)) || !on_device(comm, c.recv, recv_bytes)) {
    return fail(comm, ncclInvalidArgument,
                std::string(name) + ": a buffer is not device memory of CUDA device " +
                    std::to_string(comm->ordinal) + " holding the count's bytes");
  }
  if (group.depth > 0) {
    group.calls.emplace_back(comm, c);
    return ncclSuccess;
  }
  return enqueue(comm, c);
}

}  // namespace
}  // namespace fakenccl

using namespace fakenccl;  // NOLINT(google-build-using-namespace): the C ABI below

extern "C" {

FAKENCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  std::lock_guard lock(global().mu);
  *version = global().version != 0 ? global().version : NCCL_VERSION_CODE;
  return ncclSuccess;
}

FAKENCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

FAKENCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  // Valid until this thread's next call, as NCCL's.
  thread_local std::array<char, 1024> text{};
  const std::string last = last_error(comm);
  const std::size_t n = std::min(last.size(), text.size() - 1);
  std::memcpy(text.data(), last.data(), n);
  text[n] = '\0';
  return text.data();
}

FAKENCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  if (auto r = injected_result("ncclGetUniqueId", -1); r != ncclSuccess) return r;
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(mu);
  for (std::size_t i = 0; i < sizeof id->internal; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(id->internal + i, &v, 8);
  }
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                              int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: bad comm, nranks or rank");
  }
  if (auto r = injected_result("ncclCommInitRank", rank); r != ncclSuccess) {
    return fail(nullptr, r, "ncclCommInitRank: injected failure");
  }
  auto made = std::make_unique<ncclComm>();
  made->rank = rank;
  made->nranks = nranks;
  CUdevice dev = 0;
  if (cuCtxGetCurrent(&made->ctx) != CUDA_SUCCESS || made->ctx == nullptr ||
      cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA device");
  }
  made->ordinal = static_cast<int>(dev);
  if (auto r = join(made.get(), commId); r != ncclSuccess) return r;
  std::lock_guard lock(global().mu);
  global().comms.insert(made.get());
  *comm = made.release();
  return ncclSuccess;
}

namespace {
ncclResult_t finish(ncclComm_t comm, bool abort) {
  if (!live(comm)) return ncclInvalidArgument;
  leave(comm, abort);
  // NCCL waits for the communicator's queued work (destroy) or cancels it
  // (abort; the clique wakes what waits for this rank).
  while (comm->queued.load() > 0) std::this_thread::yield();
  std::lock_guard lock(global().mu);
  global().comms.erase(comm);
  global().registrations -= comm->registrations.size();
  for (auto& [handle, range] : comm->registrations) delete static_cast<char*>(handle);
  delete comm;
  return ncclSuccess;
}
}  // namespace

FAKENCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return finish(comm, false);
}

FAKENCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return finish(comm, true);
}

FAKENCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!live(comm) || error == nullptr) return ncclInvalidArgument;
  *error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclCommCount(ncclComm_t comm, int* count) {
  if (!live(comm) || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) {
  if (!live(comm) || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  const call c{kind::all_reduce, send, recv, count, type, op, 0, stream};
  return collective("ncclAllReduce", comm, c, count, count);
}

FAKENCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                               size_t recvcount, ncclDataType_t datatype,
                                               ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream) {
  const call c{kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream};
  return collective("ncclReduceScatter", comm, c, times_ranks(comm, recvcount), recvcount);
}

FAKENCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           ncclDataType_t datatype, ncclComm_t comm,
                                           cudaStream_t stream) {
  const call c{kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream};
  return collective("ncclAllGather", comm, c, sendcount, times_ranks(comm, sendcount));
}

FAKENCCL_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                                           ncclDataType_t type, int root, ncclComm_t comm,
                                           cudaStream_t stream) {
  const call c{kind::broadcast, send, recv, count, type, ncclSum, root, stream};
  return collective("ncclBroadcast", comm, c, count, count);
}

FAKENCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++group.depth;
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (group.depth == 0) {
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it");
  }
  if (--group.depth > 0) return ncclSuccess;
  std::vector<std::pair<ncclComm*, call>> calls;
  calls.swap(group.calls);
  ncclResult_t result = ncclSuccess;
  for (auto& [comm, c] : calls) {
    // A communicator aborted or destroyed inside the group has gone: its
    // held calls are dropped, and the group end says so.
    const ncclResult_t r = live(comm) ? enqueue(comm, c)
                                      : fail(nullptr, ncclInvalidArgument,
                                             "ncclGroupEnd: a communicator of the group is gone");
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result;
}

FAKENCCL_EXPORT ncclResult_t ncclCommRegister(ncclComm_t comm, void* buff, size_t size,
                                              void** handle) {
  if (!live(comm)) return fail(nullptr, ncclInvalidArgument, "ncclCommRegister: no such comm");
  if (auto r = injected_result("ncclCommRegister", comm->rank); r != ncclSuccess) {
    return fail(comm, r, "ncclCommRegister: injected failure");
  }
  if (buff == nullptr || size == 0 || handle == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclCommRegister: null buffer, zero size or handle");
  }
  int ordinal = -1;
  const int pieces =
      fakecuda_backing_allocations(reinterpret_cast<std::uintptr_t>(buff), size, &ordinal);
  if (pieces == 0 || ordinal != comm->ordinal) {
    return fail(comm, ncclInvalidArgument,
                "ncclCommRegister: the range is not device memory of CUDA device " +
                    std::to_string(comm->ordinal));
  }
  if (pieces > 1) {  // NCCL #1820
    return fail(comm, ncclInvalidArgument,
                "ncclCommRegister: the range is backed by " + std::to_string(pieces) +
                    " physical allocations; NCCL registers one");
  }
  auto* h = new char;
  std::lock_guard lock(global().mu);
  comm->registrations.emplace(h, std::make_pair(reinterpret_cast<std::uintptr_t>(buff), size));
  ++global().registrations;
  *handle = h;
  return ncclSuccess;
}

FAKENCCL_EXPORT ncclResult_t ncclCommDeregister(ncclComm_t comm, void* handle) {
  if (!live(comm)) return fail(nullptr, ncclInvalidArgument, "ncclCommDeregister: no such comm");
  std::lock_guard lock(global().mu);
  auto it = comm->registrations.find(handle);
  if (it == comm->registrations.end()) {
    return fail(comm, ncclInvalidArgument, "ncclCommDeregister: unknown handle");
  }
  comm->registrations.erase(it);
  --global().registrations;
  delete static_cast<char*>(handle);
  return ncclSuccess;
}

// --- test controls -----------------------------------------------------------

FAKENCCL_EXPORT int fakenccl_fail_call(const char* name, int rank, unsigned long long nth,
                                       int result) {
  if (name == nullptr || nth == 0 || result == 0) return -1;
  std::lock_guard lock(global().mu);
  global().failures[name] = injected{rank, nth, result};
  return 0;
}

FAKENCCL_EXPORT void fakenccl_set_version(int version) {
  std::lock_guard lock(global().mu);
  global().version = version;
}

FAKENCCL_EXPORT unsigned long long fakenccl_live_comms(void) {
  std::lock_guard lock(global().mu);
  return global().comms.size();
}

FAKENCCL_EXPORT unsigned long long fakenccl_live_registrations(void) {
  std::lock_guard lock(global().mu);
  return global().registrations;
}

FAKENCCL_EXPORT void fakenccl_reset(void) {
  std::lock_guard lock(global().mu);
  global().failures.clear();
  global().version = 0;
}

}  // extern "C"
