// The NVMe rate of a plan measured on the directory the offload would use:
// a file of `bytes` written with O_DIRECT in 4 MiB requests (then fsync),
// read back the same way, and removed. The plan takes the slower of the two
// rates (an offloaded step both reads and writes).
//
// Thread safety: a free function; concurrent calls use separate files.
#pragma once

#include <cstdint>
#include <string>

#include "strata/error.hpp"

namespace strata::plan {

struct nvme_rates {
  double write_gbps = 0;  ///< 10^9 bytes per second
  double read_gbps = 0;
};

/// Errors: io_error naming the directory and the call (not a directory,
/// not writable, O_DIRECT refused, the disk full), invalid_argument for
/// fewer than 4 MiB.
result<nvme_rates> measure_nvme(const std::string& dir, std::uint64_t bytes = 256ULL << 20);

}  // namespace strata::plan
