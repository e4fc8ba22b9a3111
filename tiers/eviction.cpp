// Eviction: which released buffer goes down a tier (victim: the oracle's
// farthest next use, else the least recently released, as its policy
// allows), and how it goes: device to host memory (or straight to NVMe
// through the staging chunks when the host tier cannot hold it), host
// memory to NVMe, and an nvme_home buffer's trip home at its last release.
//
// Invariant: a buffer leaves a tier only after its copy below is complete
// (and, to NVMe, verified unless nvme_verify is off); any failure leaves it
// where it was. Called with the manager's mutex held.
#include <string>
#include <utility>

#include "pinned_host_pool.hpp"
#include "residency_core.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

residency_core::buffer* residency_core::victim(tier from, const std::uint64_t* limit,
                                               std::size_t for_bytes) {
  return order_.pick(
      buffers_, from, limit,
      [from](const buffer& b) {
        return b.where == from && b.acquired == 0 && may_leave(b.policy, from);
      },
      [&](const buffer& b) {
        return from == tier::host && for_bytes > 0 && host_->serves(b.bytes, for_bytes);
      });
}

status residency_core::spill_to_nvme(buffer& b) {
  if (spill_clean(b)) return {};
  if (nvme_ == nullptr) {
    return {errc::out_of_memory, "residency manager: host tier full and no NVMe tier"};
  }
  auto extent = nvme_->write(b.host, b.bytes);  // returns once written with its checksum
  while (!extent && extent.code() == errc::out_of_memory && drop_a_kept_extent()) {
    extent = nvme_->write(b.host, b.bytes);
  }
  if (!extent) return extent.error();
  if (verify_nvme_) {
    if (auto read_back = nvme_->verify(*extent); !read_back) {
      (void)nvme_->erase(*extent);  // the host copy stays the buffer's
      return read_back;
    }
  }
  host_->free(b.host);
  b.host = nullptr;
  b.extent = *extent;
  moved(b, tier::nvme, accounts_.c.spills_to_nvme);
  return {};
}

result<void*> residency_core::host_memory(std::size_t bytes) {
  for (bool retired = false;;) {
    auto p = host_->allocate(bytes);
    if (p || p.code() != errc::out_of_memory) return p;
    if (!retired && accounts_.c.staging_bytes > 0) {
      // Fills in flight hold host memory: wait for them before spilling.
      for (auto& [handle, b] : buffers_) (void)retire(b, true);
      retired = true;
      continue;
    }
    if (drop_a_shadow(bytes)) continue;  // cheapest: the device copy stays
    buffer* v = victim(tier::host, nullptr, bytes);
    if (v == nullptr) return p.error();
    if (auto s = spill_to_nvme(*v); !s) return s;
  }
}

status residency_core::spill_to_host(buffer& b) {
  (void)retire(b, true);
  if (b.prefetched) {  // brought in ahead and never used: wasted
    ++accounts_.c.prefetch_wasted;
    accounts_.c.prefetch_wasted_bytes += b.bytes;
    set_prefetched(b, false);
  }
  if (spill_clean(b)) return {};  // unwritten: a copy below is the buffer
  auto host = host_memory(b.bytes);
  if (!host && host.code() == errc::out_of_memory && nvme_ != nullptr &&
      may_leave(b.policy, tier::host)) {
    return stream_to_nvme(b);  // the host tier cannot hold it: straight to NVMe
  }
  if (!host && host.code() == errc::out_of_memory && nvme_ != nullptr) {
    return {errc::out_of_memory, "residency manager: a host_only buffer of " +
                                     std::to_string(b.bytes) +
                                     " bytes finds no room in the host tier (" +
                                     host.error().message() + ") and may not go to NVMe"};
  }
  if (!host) return host.error();
  // After the work the releasing stream had queued on it.
  if (auto s = copy(*host, b.device, b.bytes, copy_direction::device_to_host,
                    b.has_release_event ? &b.released : nullptr);
      !s) {
    host_->free(*host);
    return s;
  }
  (void)alloc_.try_free(b.device);
  b.device = nullptr;
  b.host = *host;
  moved(b, tier::host, accounts_.c.spills_to_host);
  return {};
}

status residency_core::spill_a_victim(const std::uint64_t* limit, buffer** spilled) {
  *spilled = nullptr;
  status passed;
  for (;;) {
    buffer* v = victim(tier::device, limit);
    if (v == nullptr) break;
    status s = spill_to_host(*v);
    if (!s && s.code() == errc::out_of_memory && v->policy == residency_policy::host_only) {
      order_.pass_over(v);  // stays on the device; another may go instead
      passed = std::move(s);
      continue;
    }
    if (s) *spilled = v;
    order_.end_spill();
    return s;
  }
  order_.end_spill();
  return passed;
}

std::size_t residency_core::spill(std::size_t bytes) {
  std::lock_guard lock(mu_);
  std::size_t freed = 0;
  while (freed < bytes) {
    buffer* v = nullptr;
    if (!spill_a_victim(nullptr, &v) || v == nullptr) break;
    freed += v->bytes;
  }
  return freed;
}

result<void*> residency_core::device_memory(std::size_t bytes, const std::uint64_t* limit) {
  // The pressure handler (spill) the allocation may call keeps to `limit`.
  const auto scope = order_.limit_to(limit);
  // A prefetch makes room first, within its limit, so that one that cannot
  // fit is not issued quietly rather than through the allocator's OOM
  // chain and report.
  while (limit != nullptr) {
    memory_info room;
    try {
      room = alloc_.available_memory();
    } catch (const error& e) {
      return e.to_status();
    }
    if (room.free >= bytes) break;
    buffer* v = nullptr;
    if (auto s = spill_a_victim(limit, &v); !s) return s;
    if (v == nullptr) {
      return status{errc::out_of_memory, "residency manager: no room for a prefetch"};
    }
  }
  for (;;) {
    // The allocator's pressure handler already spilled enough bytes; but
    // freed blocks may share pages with live ones, so spill on until the
    // request fits or nothing evictable is left.
    auto p = alloc_.try_malloc(bytes);
    if (p || p.code() != errc::out_of_memory) return p;
    buffer* v = nullptr;
    if (auto s = spill_a_victim(limit, &v); !s) return s;
    if (v == nullptr) return p.error();
  }
}

status residency_core::send_home(buffer& b) {
  if (b.where == tier::device) {
    (void)retire(b, true);  // a finished fill's host copy becomes its shadow
    if (!spill_clean(b)) return stream_to_nvme(b);  // after the releasing stream's work
  }
  if (b.where == tier::host) return spill_to_nvme(b);  // verified unless nvme_verify is off
  return {};
}

}  // namespace strata
