// The residency manager's accounting: its counters, the bytes each tier
// holds, what moved between tiers, and the probes that time how long
// consuming streams wait for fills.
//
// Invariant: device_bytes, host_bytes and nvme_bytes are the bytes of the
// registered buffers on each tier (moved() keeps them so).
// Cost: a few integer operations per update.
//
// Thread safety: none of its own; the core updates it under its mutex (the
// probes' host functions excepted: stall_probes.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "stall_probes.hpp"
#include "strata/residency_counters.hpp"
#include "strata/residency_types.hpp"

namespace strata {

class residency_accounts {
 public:
  /// The counters, updated in place by the core's parts.
  residency_counters c;

  /// The bytes tier `t` (device, host or NVMe) holds now.
  [[nodiscard]] std::uint64_t& tier_bytes(tier t) noexcept;
  /// A buffer of `bytes` moved from tier `from` to `to`: the tiers' bytes,
  /// and unless it was a clean spill (`copied` false: the copy below was
  /// there already) the bytes moved in that direction.
  void moved(tier from, tier to, std::uint64_t bytes, bool copied) noexcept;
  /// The counters with the probes' measurements added.
  [[nodiscard]] residency_counters snapshot() const;
  /// The stall probes (their own slots; see stall_probes.hpp).
  [[nodiscard]] stall_probes& probes() noexcept { return *probes_; }

 private:
  std::unique_ptr<stall_probes> probes_ = std::make_unique<stall_probes>();
};

}  // namespace strata
