// Host access (residency.hpp, acquire_host): a buffer's bytes in pinned
// host memory for the host to read or write, as an optimizer step on host
// threads needs them (ZeRO-Offload's way: the state never crosses to the
// device). The buffer comes up to the host tier (from NVMe: read and
// checked; from the device: copied after its releasing stream's work, the
// device memory freed) and stays there, held, until release_host.
//
// Invariants: `host_held` counts the host holds among `acquired`, so a
// held buffer is no victim, prefetch leaves it alone and write-behind
// skips it (they all test `acquired`); a device acquire of it and a host
// acquire of a buffer acquired on the device are errors. A read_write hold
// drops the copies below (a kept extent) and stales a write-behind under
// way: the host is about to change the bytes.
//
// Cost: a copy or a read when the buffer is not on the host already;
// otherwise a lookup under the manager's mutex.
#include <string>

#include "pinned_host_pool.hpp"
#include "residency_core.hpp"

namespace strata {

status residency_core::bring_to_host(buffer& b) {
  if (b.where == tier::none) {
    auto host = host_memory(b.bytes);
    if (!host) return host.error();
    b.host = *host;
    b.where = tier::host;
    accounts_.c.host_bytes += b.bytes;
    b.no_writeback = false;
    return {};
  }
  if (b.where == tier::device) {
    if (auto s = spill_to_host(b); !s) return s;
    if (b.where == tier::host) return {};
    // The host tier could not hold it and it streamed on to NVMe: it is
    // read back below, if the host now has room.
  }
  if (b.where == tier::nvme) {
    auto host = host_memory(b.bytes);
    if (!host) return host.error();
    return read_to_host(b, *host);
  }
  return {};
}

result<void*> residency_core::acquire_host(std::uint64_t handle, access_mode mode) {
  std::unique_lock lock(mu_);
  retire_finished();
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  buffer& b = it->second;
  if (b.policy == residency_policy::pinned_on_device) {
    return refused(handle, "is pinned on the device: the host cannot hold it");
  }
  if (b.acquired > b.host_held) return refused(handle, "is acquired on the device");
  if (mode == access_mode::overwrite && b.where == tier::nvme) forget_below(lock, b);
  const bool reads = !b.reading && b.where == tier::nvme;
  ++b.acquired;  // not a victim while it comes up
  ++b.host_held;
  if (b.reading) wait_for_read(lock, b);  // a prefetch's read lands it on the host
  // A prefetch's read that landed on the host has served: it goes no
  // further. (One still bound for the device is undone below, as wasted.)
  if (b.where == tier::host) set_prefetched(b, false);
  status st = b.read_failure;
  b.read_failure = {};
  if (st && b.where != tier::host) st = bring_to_host(b);
  // Reads in flight are no victims: a host tier full of them (the
  // prefetcher's reads ahead) has room once they land.
  while (!st && st.code() == errc::out_of_memory && reading_bytes_ > 0) {
    const std::uint64_t before = reading_bytes_;
    reads_done_.wait(lock, [&] { return reading_bytes_ < before; });
    st = bring_to_host(b);
  }
  if (!st) {
    --b.acquired;
    --b.host_held;
    return st;
  }
  ++accounts_.c.host_holds;
  if (reads) ++accounts_.c.host_holds_read;
  if (mode != access_mode::read_only) {
    mark_written(b);
    b.write_stale = true;  // a write-behind under way no longer copies its bytes
  }
  return b.host;
}

status residency_core::release_host(std::uint64_t handle) {
  std::lock_guard lock(mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  buffer& b = it->second;
  if (b.host_held == 0) return refused(handle, "is not acquired on the host");
  --b.host_held;
  --b.acquired;
  b.released_at = order_.stamp();
  b.no_writeback = false;  // its bytes may be new: worth a write-behind again
  if (b.acquired == 0 && b.policy == residency_policy::nvme_home) return send_home(b);
  return {};
}

}  // namespace strata
