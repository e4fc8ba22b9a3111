// NCCL, opened with dlopen when a communicator first needs it (libstrata
// does not link it), and the functions Strata calls. The types are NCCL's
// ABI written out here (nccl.h is not needed to build Strata): results,
// data types and operations are plain ints, a communicator an opaque
// pointer, a unique id 128 bytes.
//
// Versions: NCCL >= 2.10 (ncclAvg and ncclBfloat16); buffer registration
// needs >= 2.19 (ncclCommRegister) and is refused as not_supported below.
//
// Thread safety: `load` may be called from any thread; a loaded table is
// immutable and stays loaded for the life of the process.
#pragma once

#include <cstddef>
#include <string>

#include "strata/error.hpp"

namespace strata::nccl {

using comm_t = void*;
using result_t = int;    // ncclResult_t: 0 success
using stream_t = void*;  // cudaStream_t, the same handle as CUstream
constexpr std::size_t unique_id_bytes = 128;
struct unique_id_t {
  char internal[unique_id_bytes];
};

constexpr int min_version = 21000;       // 2.10.0
constexpr int register_version = 21900;  // 2.19.0

/// The version code in NCCL_VERSION(X, Y, Z) form, as a string "X.Y.Z".
std::string version_text(int code);

struct library {
  std::string file;
  int version = 0;
  result_t (*get_unique_id)(unique_id_t*) = nullptr;
  result_t (*comm_init_rank)(comm_t*, int, unique_id_t, int) = nullptr;
  result_t (*comm_destroy)(comm_t) = nullptr;
  result_t (*comm_abort)(comm_t) = nullptr;
  result_t (*comm_get_async_error)(comm_t, result_t*) = nullptr;
  const char* (*get_error_string)(result_t) = nullptr;
  const char* (*get_last_error)(comm_t) = nullptr;  // null before NCCL 2.13
  result_t (*all_reduce)(const void*, void*, std::size_t, int, int, comm_t, stream_t) = nullptr;
  result_t (*reduce_scatter)(const void*, void*, std::size_t, int, int, comm_t, stream_t) = nullptr;
  result_t (*all_gather)(const void*, void*, std::size_t, int, comm_t, stream_t) = nullptr;
  result_t (*broadcast)(const void*, void*, std::size_t, int, int, comm_t, stream_t) = nullptr;
  result_t (*group_start)() = nullptr;
  result_t (*group_end)() = nullptr;
  result_t (*comm_register)(comm_t, void*, std::size_t, void**) = nullptr;  // null before 2.19
  result_t (*comm_deregister)(comm_t, void*) = nullptr;

  /// comm_error naming `what`, NCCL's error string and, when there is one,
  /// its last error message for `comm`.
  [[nodiscard]] status error(const std::string& what, result_t r, comm_t comm) const;
};

/// The NCCL library `file` (e.g. "libnccl.so.2"), opened and checked once.
/// Errors: not_supported (cannot be opened, a function is missing, or the
/// version is older than 2.10; the message says which).
result<const library*> load(const std::string& file);

}  // namespace strata::nccl
