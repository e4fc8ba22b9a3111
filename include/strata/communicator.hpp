// Collectives between the ranks of a job (docs/collectives.md): all-reduce,
// reduce-scatter, all-gather and broadcast over device memory, in stream
// order, as NCCL defines them.
//
// One interface; `create_local_communicators` makes the `local` one: every
// rank is a device in this process (sim devices: the host moves the data),
// each rank's calls made by its own thread or by one thread for all.
//
// Semantics (NCCL's): every rank makes the same sequence of collective calls
// with matching arguments (kind, element count, dtype, operation, root). A
// call checks its arguments, queues the collective on `stream` and returns;
// the buffers are read and written when every rank's stream has reached it,
// and work queued on `stream` after it runs after it. The caller keeps the
// buffers alive and unwritten until then. In place is allowed where NCCL
// allows it: all-reduce and broadcast with send == recv, reduce-scatter with
// send + rank * recv_count == recv, all-gather with recv + rank * send_count
// == send.
//
// Errors: a bad argument is invalid_argument from the call itself. What is
// found when the collective runs (ranks that disagree, a rank that failed a
// call, a rank that does not arrive within the timeout) cannot be returned
// by the call that queued it: the communicator *fails* (comm_error with a
// message naming the collective, its sequence number and the ranks), every
// rank's later calls return that error, `async_error()` reports it (as
// ncclCommGetAsyncError) and the failed collective writes no output. A
// failed communicator stays failed; make a new one.
//
// Thread safety: one communicator (one rank) is called by one thread at a
// time, as an NCCL communicator; the communicators of different ranks may be
// called concurrently. `async_error`, `rank`, `size` may be called from any
// thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "strata/collectives.h"
#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/kernels.hpp"

namespace strata {

/// The reduction of all-reduce and reduce-scatter.
enum class reduce_op : std::uint8_t {
  sum,  ///< the sum over ranks
  avg,  ///< the sum over ranks divided by the number of ranks
};

/// The four collectives.
enum class collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };
/// "all_reduce", "reduce_scatter", "all_gather", "broadcast".
STRATA_API const char* collective_name(collective c) noexcept;

/// One collective call as queued: `count` is the elements each rank sends
/// (all-reduce, all-gather, broadcast) or receives (reduce-scatter).
struct collective_call {
  collective kind = collective::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  dtype type = dtype::f32;
  reduce_op op = reduce_op::sum;
  int root = 0;  ///< broadcast only
  stream_handle stream{};
};

/// A rank's end of a group of ranks that run collectives together.
class STRATA_API communicator {
 public:
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) = delete;
  communicator& operator=(communicator&&) = delete;
  /// Leaves the group. Collectives already queued still run (or fail) on
  /// their streams; synchronize them first.
  virtual ~communicator();

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// This rank's device: the buffers and streams of its calls are its.
  [[nodiscard]] device& dev() const noexcept { return dev_; }

  /// recv[i] = op over ranks of send[i], i < count, on every rank.
  status all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op,
                    stream_handle stream);
  /// recv[i] = op over ranks of send[rank * recv_count + i], i < recv_count;
  /// `send` holds size() * recv_count elements.
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type,
                        reduce_op op, stream_handle stream);
  /// recv[r * send_count + i] = rank r's send[i]; `recv` holds size() *
  /// send_count elements.
  status all_gather(const void* send, void* recv, std::size_t send_count, dtype type,
                    stream_handle stream);
  /// recv[i] = rank `root`'s send[i], on every rank (`send` is read on the
  /// root only and may be null elsewhere).
  status broadcast(const void* send, void* recv, std::size_t count, dtype type, int root,
                   stream_handle stream);

  /// Group calls (ncclGroupStart/End): collectives called between them are
  /// queued together at the outermost group_end, so one thread may drive
  /// several ranks or several collectives as one. Groups nest. Errors:
  /// invalid_argument for group_end without group_start.
  status group_start();
  status group_end();

  /// Registers [ptr, ptr + bytes) of this rank's device memory for
  /// collectives (ncclCommRegister): returns a handle for
  /// `deregister_buffer`. Errors: invalid_argument (null, zero size, a range
  /// overlapping a registered one), the implementation's.
  result<std::uint64_t> register_buffer(void* ptr, std::size_t bytes);
  /// Undoes `register_buffer`. Errors: invalid_argument (unknown handle).
  status deregister_buffer(std::uint64_t handle);
  /// Bytes registered now.
  [[nodiscard]] std::size_t registered_bytes() const;

  /// OK, or the comm_error the communicator failed with. Never blocks.
  status async_error() const { return do_async_error(); }

 protected:
  communicator(device& dev, int rank, int size);

 private:
  status submit(const collective_call& call);
  virtual status do_collective(const collective_call& call) = 0;
  virtual status do_group_start() = 0;
  virtual status do_group_end() = 0;
  virtual status do_register(void* ptr, std::size_t bytes) = 0;
  virtual status do_deregister(void* ptr) = 0;
  virtual status do_async_error() const = 0;
  /// Called with the argument error of a call on this rank: the other ranks
  /// cannot complete the collective it was (implementations may fail the
  /// group at once instead of letting the others time out).
  virtual void do_call_failed(const collective_call& call, const status& why) = 0;

  device& dev_;
  int rank_;
  int size_;
  struct registration {
    std::uint64_t handle;
    std::uintptr_t begin;
    std::size_t bytes;
  };
  std::vector<registration> registered_;
  std::uint64_t next_registration_ = 1;
};

/// Options of the `local` communicator.
struct local_comm_options {
  /// How long a rank's collective waits for the others before the group
  /// fails (comm_error naming the missing ranks).
  std::chrono::milliseconds timeout{60'000};
  /// The modeled link rate between devices, in GB/s (1e9 bytes/s), for a
  /// ring: all-reduce moves 2 (n - 1) / n of the buffer per rank,
  /// reduce-scatter and all-gather (n - 1) / n of the full buffer,
  /// broadcast the buffer once. 0: collectives take only the host's time;
  /// otherwise min_link_gbps to max_link_gbps.
  double link_gbps = 0;
  /// Modeled latency per collective, in microseconds: 0 to max_latency_us.
  double latency_us = 0;
  /// Timing-only devices only: the group stands for this many ranks, of
  /// which the devices given are ranks 0 .. devices - 1. Every
  /// communicator's size() is this count, collectives' buffers are sized
  /// for it and their modeled time is that of a ring of this many; the
  /// ranks not given are taken to do what the given ones do (a data-parallel
  /// job's ranks are alike, so a few model thousands). 0: as many as the
  /// devices. Otherwise the device count to max_modeled_ranks.
  std::size_t modeled_ranks = 0;
};

/// The most ranks a local group may stand for (local_comm_options::modeled_ranks).
inline constexpr std::size_t max_modeled_ranks = std::size_t{1} << 20;

/// The range of local_comm_options::link_gbps (besides 0): 1 MB/s to 1 PB/s.
inline constexpr double min_link_gbps = 1e-3;
inline constexpr double max_link_gbps = 1e6;
/// The most local_comm_options::latency_us: one second per collective.
inline constexpr double max_latency_us = 1e6;

/// The `local` communicators: rank r of the result runs on `devices[r]`.
/// Every device must be a distinct device whose memory the host can reach
/// (`memory_is_host()`, the sim device), or every one timing-only
/// (`timing_only()`, `sim:...,data=none`): then collectives are checked,
/// matched across ranks and take their modeled time, and move no bytes. Reductions are done in fp32
/// in rank order 0, 1, ..., n - 1 (avg: then one division by n) and rounded once to the dtype: fp32
/// results are bit for bit the host's sum in that order, bf16 and fp16 results are that fp32 value
/// rounded to nearest even. Errors: invalid_argument (no devices, a null or repeated device, a
/// timeout of 0, a rate or latency out of its range or not a number, timing-only and other
/// devices mixed),
/// not_supported (a device the host cannot read).
STRATA_API result<std::vector<std::unique_ptr<communicator>>> create_local_communicators(
    std::span<device* const> devices, const local_comm_options& options = {});

namespace c_api {
/// The communicator behind a C handle (strata/collectives.h), counted as in
/// use until give_back(): strata_comm_destroy refuses while any borrow is
/// left (gradient buckets and prefetchers made through the C API hold one).
/// Null for a null or destroyed handle. Thread safety: atomics.
STRATA_API communicator* borrow(strata_comm* handle);
/// Ends one borrow() of `handle`.
STRATA_API void give_back(strata_comm* handle);
}  // namespace c_api

}  // namespace strata
