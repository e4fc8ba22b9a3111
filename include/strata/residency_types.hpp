// The residency manager's vocabulary (strata/residency.hpp): what a buffer
// holds, where it may go, where it is, how an acquire uses it, and what a
// prefetch did and may do.
//
// Thread safety: values and a pure function.
#pragma once

#include <cstdint>
#include <limits>

namespace strata {

enum class buffer_kind : std::uint8_t { parameter, gradient, optimizer_state, other };
enum class residency_policy : std::uint8_t {
  evictable,         ///< may be spilled while released, to host memory and on to NVMe
  pinned_on_device,  ///< never spilled
  host_only,         ///< may be spilled to host memory while released, never to NVMe
  nvme_home          ///< written to NVMe at its last release (evictable in between)
};
enum class tier : std::uint8_t { none, device, host, nvme };

/// Whether a released buffer under `policy` may be spilled from tier `from`:
/// from the device to host memory (`evictable`, `host_only`, `nvme_home`)
/// or from host memory to NVMe (`evictable`, `nvme_home`).
[[nodiscard]] constexpr bool may_leave(residency_policy policy, tier from) noexcept {
  if (policy == residency_policy::evictable || policy == residency_policy::nvme_home) return true;
  return policy == residency_policy::host_only && from == tier::device;
}

/// How an acquire uses the buffer.
enum class access_mode : std::uint8_t {
  read_write,  ///< may write it: a later spill copies the device bytes back
  /// Only reads it (forward and backward use of parameters): the host copy
  /// it was filled from and the NVMe extent it was read from stay valid, so
  /// a spill frees the device (or host) memory without copying back or
  /// writing. Writes made under a read_only acquire are lost at the next
  /// spill.
  read_only,
  /// Writes every byte before reading any (a gradient's first
  /// accumulation of a step): a spilled buffer is not filled back, and the
  /// copies it had below (host memory, an NVMe extent) are freed, so the
  /// bytes it hands out are undefined. Spilled later like read_write.
  overwrite
};

/// What a prefetch() did.
enum class prefetch_outcome : std::uint8_t {
  resident,     ///< nothing to do: there already, on its way, acquired, or never filled
  started,      ///< a read or a copy was issued
  over_budget,  ///< it would pass the limits: nothing issued
  no_room       ///< no memory without spilling a buffer needed sooner: nothing issued
};

/// Limits a prefetch() keeps within (checked before it issues anything).
struct prefetch_limits {
  /// Most bytes headed for the device by prefetch and not yet acquired
  /// (fills in flight plus prefetched buffers), this one included.
  std::uint64_t device_bytes = std::numeric_limits<std::uint64_t>::max();
  /// Most fills outstanding (NVMe reads and device copies), this one included.
  std::uint64_t inflight = std::numeric_limits<std::uint64_t>::max();
};

}  // namespace strata
