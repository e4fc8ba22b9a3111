// The stand-in NCCL's cliques: ranks joining one unique id, and each
// collective's rendezvous on the ranks' streams (see fake_nccl.hpp).
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_nccl.hpp"

namespace fakenccl {
namespace {

std::chrono::milliseconds env_ms(const char* name, long fallback) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): set before threads
  const long ms = v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
  return std::chrono::milliseconds(ms > 0 ? ms : fallback);
}

std::mutex registry_mu;
std::map<std::string, std::shared_ptr<clique>> cliques;  // by unique id bytes
std::string global_error;                                // ncclGetLastError(NULL)

struct queued_call {
  ncclComm* comm;
  std::shared_ptr<clique> group;
  std::uint64_t seq;
  call c;
};

// Runs on the rank's stream (a driver thread) when the stream reaches it.
void CUDA_CB on_stream(void* arg) {
  std::unique_ptr<queued_call> q(static_cast<queued_call*>(arg));
  clique& g = *q->group;
  const int rank = q->comm->rank;
  ncclResult_t result = ncclSuccess;
  std::string error;
  {
    std::unique_lock lock(g.mu);
    auto& s = g.slots[q->seq];
    if (s.calls.empty()) {
      s.calls.resize(static_cast<std::size_t>(g.nranks));
      s.arrived.assign(static_cast<std::size_t>(g.nranks), false);
    }
    s.calls[static_cast<std::size_t>(rank)] = q->c;
    s.arrived[static_cast<std::size_t>(rank)] = true;
    if (++s.arrivals == g.nranks && !g.aborted && !s.done) {
      s.result = run_collective(s.calls, s.error);
      s.done = true;
      g.cv.notify_all();
    }
    const bool finished =
        g.cv.wait_for(lock, collective_timeout(), [&] { return s.done || g.aborted; });
    if (s.done) {
      result = s.result;
      error = s.error;
    } else if (g.aborted) {
      result = ncclRemoteError;
      error = "collective #" + std::to_string(q->seq) + ": rank " + std::to_string(g.aborted_by) +
              " aborted its communicator";
    } else if (!finished) {
      std::string missing;
      for (int r = 0; r < g.nranks; ++r) {
        if (!s.arrived[static_cast<std::size_t>(r)]) missing += " " + std::to_string(r);
      }
      // Failed for every rank: one arriving late must not write buffers
      // the others have given up on.
      s.done = true;
      s.result = result = ncclSystemError;
      s.error = error =
          "collective #" + std::to_string(q->seq) + " timed out waiting for rank(s)" + missing;
    }
    if (++s.departures == g.nranks) g.slots.erase(q->seq);
  }
  if (result != ncclSuccess) {
    int expected = ncclSuccess;
    if (q->comm->async_error.compare_exchange_strong(expected, result)) {
      (void)fail(q->comm, result, error);
    }
  }
  q->comm->queued.fetch_sub(1);
}

}  // namespace

std::chrono::milliseconds collective_timeout() {
  static const auto ms = env_ms("FAKENCCL_TIMEOUT_MS", 60'000);
  return ms;
}

ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& message) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->error_mu);
    comm->last_error = message;
  } else {
    std::lock_guard lock(registry_mu);
    global_error = message;
  }
  return r;
}

std::string last_error(ncclComm* comm) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->error_mu);
    return comm->last_error;
  }
  std::lock_guard lock(registry_mu);
  return global_error;
}

std::size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32:
      return 4;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    default:
      return 0;
  }
}

std::size_t bytes_of(std::size_t count, ncclDataType_t type) {
  const std::size_t e = element_bytes(type);
  return e == 0 || count > SIZE_MAX / e ? 0 : count * e;
}

ncclResult_t join(ncclComm* comm, const ncclUniqueId& id) {
  const std::string key(id.internal, sizeof id.internal);
  std::shared_ptr<clique> g;
  {
    std::lock_guard lock(registry_mu);
    auto& slot = cliques[key];
    if (slot == nullptr) {
      slot = std::make_shared<clique>();
      slot->nranks = comm->nranks;
      slot->joined.assign(static_cast<std::size_t>(comm->nranks), false);
      slot->ordinals.assign(static_cast<std::size_t>(comm->nranks), -1);
    }
    g = slot;
  }
  std::unique_lock lock(g->mu);
  if (g->nranks != comm->nranks) {
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRank: nranks " + std::to_string(comm->nranks) + " differs from the " +
                    std::to_string(g->nranks) + " of the ranks that joined this id first");
  }
  if (g->joined[static_cast<std::size_t>(comm->rank)]) {
    return fail(nullptr, ncclInvalidUsage,
                "ncclCommInitRank: rank " + std::to_string(comm->rank) + " joined this id twice");
  }
  for (int r = 0; r < g->nranks; ++r) {
    if (g->joined[static_cast<std::size_t>(r)] &&
        g->ordinals[static_cast<std::size_t>(r)] == comm->ordinal) {
      return fail(nullptr, ncclInvalidUsage,
                  "ncclCommInitRank: duplicate GPU detected: rank " + std::to_string(comm->rank) +
                      " and rank " + std::to_string(r) + " both use CUDA device " +
                      std::to_string(comm->ordinal));
    }
  }
  g->joined[static_cast<std::size_t>(comm->rank)] = true;
  g->ordinals[static_cast<std::size_t>(comm->rank)] = comm->ordinal;
  ++g->joined_count;
  g->cv.notify_all();
  const bool all = g->cv.wait_for(lock, env_ms("FAKENCCL_INIT_TIMEOUT_MS", 10'000),
                                  [&] { return g->joined_count == g->nranks; });
  if (!all) {
    g->joined[static_cast<std::size_t>(comm->rank)] = false;
    --g->joined_count;
    // NCCL's bootstrap gives up the same way.
    return fail(nullptr, ncclSystemError,
                "ncclCommInitRank: " + std::to_string(g->nranks - g->joined_count - 1) +
                    " rank(s) never joined");
  }
  comm->group = g;
  lock.unlock();
  // Every rank has its communicator: the id is spent (NCCL ids are one-use).
  std::lock_guard reg(registry_mu);
  if (auto it = cliques.find(key); it != cliques.end() && it->second == g) cliques.erase(it);
  return ncclSuccess;
}

void leave(ncclComm* comm, bool abort) {
  if (comm->group == nullptr) return;
  std::lock_guard lock(comm->group->mu);
  if (abort && !comm->group->aborted) {
    comm->group->aborted = true;
    comm->group->aborted_by = comm->rank;
  }
  comm->group->cv.notify_all();
}

ncclResult_t enqueue(ncclComm* comm, const call& c) {
  auto* q = new queued_call{comm, comm->group, comm->next_seq++, c};
  comm->queued.fetch_add(1);
  CUcontext previous = nullptr;
  (void)cuCtxGetCurrent(&previous);
  (void)cuCtxSetCurrent(comm->ctx);
  const CUresult r = cuLaunchHostFunc(c.stream, on_stream, q);
  (void)cuCtxSetCurrent(previous);
  if (r != CUDA_SUCCESS) {
    delete q;
    comm->queued.fetch_sub(1);
    --comm->next_seq;
    return fail(comm, ncclUnhandledCudaError,
                "cuLaunchHostFunc failed with CUresult " + std::to_string(static_cast<int>(r)));
  }
  return ncclSuccess;
}

}  // namespace fakenccl
