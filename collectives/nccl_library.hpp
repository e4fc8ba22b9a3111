// NCCL, opened with dlopen when a communicator first needs it (libstrata
// does not link it), and the functions Strata calls. The types are NCCL's
// ABI written out here exactly as nccl.h declares them (nccl.h is not needed
// to build Strata): the same names at global scope, so a call through the
// table has the function's own type (clang's -fsanitize=function checks).
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

// From nccl.h (NCCL 2.x; the values are its ABI).
// NOLINTBEGIN(modernize-use-using, readability-identifier-naming)
extern "C" {
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
typedef struct CUstream_st* cudaStream_t;
}
// NOLINTEND(modernize-use-using, readability-identifier-naming)

namespace strata::nccl {

using comm_t = ncclComm_t;
using result_t = ncclResult_t;
using stream_t = cudaStream_t;

constexpr int min_version = 21000;       // 2.10.0
constexpr int register_version = 21900;  // 2.19.0

/// The version code in NCCL_VERSION(X, Y, Z) form, as a string "X.Y.Z".
std::string version_text(int code);

struct library {
  std::string file;
  int version = 0;
  result_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  result_t (*comm_init_rank)(comm_t*, int, ncclUniqueId, int) = nullptr;
  result_t (*comm_destroy)(comm_t) = nullptr;
  result_t (*comm_abort)(comm_t) = nullptr;
  result_t (*comm_get_async_error)(comm_t, result_t*) = nullptr;
  const char* (*get_error_string)(result_t) = nullptr;
  const char* (*get_last_error)(comm_t) = nullptr;  // null before NCCL 2.13
  result_t (*all_reduce)(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, comm_t,
                         stream_t) = nullptr;
  result_t (*reduce_scatter)(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, comm_t,
                             stream_t) = nullptr;
  result_t (*all_gather)(const void*, void*, std::size_t, ncclDataType_t, comm_t,
                         stream_t) = nullptr;
  result_t (*broadcast)(const void*, void*, std::size_t, ncclDataType_t, int, comm_t,
                        stream_t) = nullptr;
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
