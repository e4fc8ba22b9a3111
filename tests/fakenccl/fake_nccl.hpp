// The stand-in NCCL's communicators and the rules it enforces (a
// libnccl.so.2 for tests only, never installed; see fakenccl.h for its test
// controls and docs/collectives.md for what it checks).
//
// Ranks are threads of one process, each with a device of the stand-in CUDA
// driver (tests/fakecuda), whose device memory is host memory. A collective
// checks its arguments at the call (NCCL returns those errors at once), then
// queues a host function on the caller's stream with cuLaunchHostFunc: when
// the stream reaches it, the function joins its rank into the collective's
// slot (by sequence number); the last rank to arrive checks that every rank
// made the same call and moves the bytes for all of them. A rank whose
// stream waits longer than FAKENCCL_TIMEOUT_MS (default 60 s) fails the
// collective rather than hang a test; `ncclCommAbort` on any rank fails
// every collective waiting for it (ncclRemoteError on the others).
//
// Reductions are in fp32, in rank order 0..n-1, avg one division by n, one
// rounding to fp16/bf16: the same bits as Strata's `local` communicator.
//
// Thread safety: every entry point may be called concurrently, as NCCL's;
// one communicator is used by one thread at a time (NCCL's rule, not
// checked).
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fakenccl {

enum class kind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

/// One rank's collective call as made.
struct call {
  kind what = kind::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  ///< sent (all-reduce, all-gather, broadcast) or received
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  CUstream stream = nullptr;
};

/// The ranks made from one unique id.
struct clique {
  int nranks = 0;
  std::vector<bool> joined;
  std::vector<int> ordinals;  // each joined rank's CUDA device
  int joined_count = 0;
  bool aborted = false;
  int aborted_by = -1;
  struct slot {
    std::vector<call> calls;
    std::vector<bool> arrived;
    int arrivals = 0;
    int departures = 0;
    bool done = false;
    ncclResult_t result = ncclSuccess;
    std::string error;
  };
  std::map<std::uint64_t, slot> slots;  // by sequence number
  std::mutex mu;
  std::condition_variable cv;
};

}  // namespace fakenccl

// NCCL's opaque communicator type, defined here.
struct ncclComm {
  std::shared_ptr<fakenccl::clique> group;
  int rank = 0;
  int nranks = 0;
  int ordinal = 0;  // the CUDA device current at init
  CUcontext ctx = nullptr;
  std::uint64_t next_seq = 0;  // collectives queued so far
  std::atomic<int> async_error{ncclSuccess};
  std::mutex error_mu;
  std::string last_error;
  std::map<void*, std::pair<std::uintptr_t, std::size_t>> registrations;  // handle -> range
  std::atomic<int> queued{0};  // host functions queued and not finished
};

namespace fakenccl {

/// Records `message` as the communicator's last error (ncclGetLastError;
/// null: the process's) and returns `r`.
ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& message);

/// The last error recorded for `comm` (or, for null, by a call without a
/// communicator).
std::string last_error(ncclComm* comm);

/// The calls' element size; 0 for a type the stand-in does not reduce.
std::size_t element_bytes(ncclDataType_t type);

/// Bytes of `count` elements of `type`, or 0 when it overflows.
std::size_t bytes_of(std::size_t count, ncclDataType_t type);

/// Joins the communicator's clique for a new rank; blocks until every rank
/// has joined or FAKENCCL_INIT_TIMEOUT_MS passes.
ncclResult_t join(ncclComm* comm, const ncclUniqueId& id);

/// Leaves the clique (destroy); `abort` fails what waits for this rank.
void leave(ncclComm* comm, bool abort);

/// Queues `c` on its stream as this rank's next collective.
ncclResult_t enqueue(ncclComm* comm, const call& c);

/// How long a queued collective waits for the other ranks.
std::chrono::milliseconds collective_timeout();

/// The work of the last rank to arrive: check the calls match, move the
/// bytes (fake_reduction.cpp). Returns the error for every rank.
ncclResult_t run_collective(std::vector<call>& calls, std::string& error);

}  // namespace fakenccl
