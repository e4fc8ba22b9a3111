// The `nccl` communicator (docs/collectives.md): Strata's communicator
// interface (strata/communicator.hpp) over NCCL, loaded with dlopen (libstrata
// does not link NCCL; a machine without it gets not_supported from these
// calls, nothing else changes). Ranks run on `cuda` devices; each rank's
// buffers and streams are its device's.
//
// What Strata adds to NCCL:
// - a watchdog per communicator: a collective (or group) that has not
//   finished `timeout` after it was queued, or an asynchronous error NCCL
//   reports, aborts the communicator (ncclCommAbort) and fails it with
//   comm_error naming the collective; every later call and `async_error()`
//   return that error. A rank whose call fails (a bad argument, NCCL's
//   error) aborts at once, so the other ranks get ncclRemoteError (or their
//   own timeout) instead of waiting forever;
// - `register_buffer` is ncclCommRegister (NCCL >= 2.19, else
//   not_supported): NCCL registers a range backed by one physical
//   allocation (NCCL #1820), which `gradient_buffer` guarantees;
// - a bootstrap from torchrun's environment: rank 0 makes the unique id and
//   serves it over TCP at MASTER_ADDR:MASTER_PORT; the others fetch it,
//   retrying until `bootstrap_timeout`.
//
// Thread safety: as communicator.hpp; the creation functions may be called
// concurrently (each blocks until every rank of its group has joined).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/communicator.hpp"
#include "strata/export.hpp"

namespace strata {

/// Options of the `nccl` communicator.
struct nccl_options {
  /// The NCCL library to dlopen.
  std::string library = "libnccl.so.2";
  /// How long a queued collective may take before the watchdog aborts the
  /// communicator (PyTorch's default for NCCL is 10 minutes).
  std::chrono::milliseconds timeout{600'000};
  /// How long the TCP bootstrap waits for the other ranks.
  std::chrono::milliseconds bootstrap_timeout{120'000};
};

/// NCCL's unique id (ncclUniqueId): made once by one rank, given to all.
struct nccl_id {
  std::array<char, 128> bytes{};
};

/// A new unique id (ncclGetUniqueId). Errors: not_supported (no usable
/// NCCL), comm_error (NCCL's).
STRATA_API result<nccl_id> nccl_unique_id(const nccl_options& options = {});

/// Rank `rank` of `size` on `dev` (a `cuda` device), from the id every rank
/// was given; blocks until all ranks have joined (ncclCommInitRank). Makes
/// `dev` current on the calling thread. Errors: invalid_argument (rank out
/// of range, a timeout of 0, a device that is not `cuda`), not_supported
/// (no usable NCCL), comm_error (NCCL's, with its message).
STRATA_API result<std::unique_ptr<communicator>> create_nccl_communicator(
    device& dev, int rank, int size, const nccl_id& id, const nccl_options& options = {});

/// torchrun's description of this process.
struct launcher_env {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
};

/// RANK, WORLD_SIZE, LOCAL_RANK (default 0), MASTER_ADDR, MASTER_PORT from
/// the environment. Errors: invalid_argument naming the variable that is
/// missing or not a number in range.
STRATA_API result<launcher_env> launcher_env_from_environment();

/// Rank `env.rank` of `env.world_size` on `dev`: rank 0 makes the id and
/// serves it at master_addr:master_port (TCP), the others fetch it, then
/// every rank joins (create_nccl_communicator). Errors: as that, and
/// comm_error when the bootstrap fails (a rank 0 that cannot listen, ranks
/// missing after `bootstrap_timeout`, ranks that disagree on the world size;
/// the message says which).
STRATA_API result<std::unique_ptr<communicator>> create_nccl_communicator(
    device& dev, const launcher_env& env, const nccl_options& options = {});

/// One rank per device of this process (the devices must be distinct
/// `cuda` devices): rank r on devices[r], each initialised on its own
/// thread. Errors: as create_nccl_communicator (the first failing rank's).
STRATA_API result<std::vector<std::unique_ptr<communicator>>> create_nccl_communicators(
    std::span<device* const> devices, const nccl_options& options = {});

}  // namespace strata
