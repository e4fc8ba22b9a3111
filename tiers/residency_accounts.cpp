#include "residency_accounts.hpp"

namespace strata {

std::uint64_t& residency_accounts::tier_bytes(tier t) noexcept {
  if (t == tier::device) return c.device_bytes;
  if (t == tier::host) return c.host_bytes;
  return c.nvme_bytes;
}

void residency_accounts::moved(tier from, tier to, std::uint64_t bytes, bool copied) noexcept {
  tier_bytes(from) -= bytes;
  tier_bytes(to) += bytes;
  if (!copied) return;
  if (to == tier::host && from == tier::device) c.bytes_to_host += bytes;
  if (to == tier::nvme) c.bytes_to_nvme += bytes;
  if (from == tier::nvme) c.bytes_from_nvme += bytes;
  if (from == tier::host && to == tier::device) c.bytes_from_host += bytes;
  c.bytes_moved += bytes;
}

residency_counters residency_accounts::snapshot() const {
  residency_counters out = c;
  out.stall_ns += probes_->stall_ns();
  out.prefetch_hits += probes_->hits();
  out.late_fills += probes_->late();
  return out;
}

}  // namespace strata
