// Write-behind (residency.hpp): while the host tier is short of room, the
// I/O thread gives host buffers that have no NVMe copy one in the
// background and keeps the extent, as a read keeps the extent it came from
// (clean_copies.cpp). Pushing such a buffer off the host is then a free,
// not an O_DIRECT write and its read-back on the thread that needs the
// room (a prefetch making room for its read, an acquire, a device spill).
//
// When: only with a host capacity and an NVMe tier, and only while the host
// tier could not make `room` bytes (host_lookahead, at most the capacity)
// without a write: free room, plus shadows, plus host buffers with a kept
// extent. With an NVMe capacity, only while the store keeps room for the
// write plus `room` (spills that must write are never short of space
// because of a write-behind). Reads go first: a write-behind starts only
// when no read is queued. Candidates in eviction order: the oracle's
// farthest next use, else the least recently released. The thresholds and
// the bounce chunk are write_behind_budget's.
//
// How: in parts of the bounce chunk. Under the mutex, a part of the
// buffer's host copy is copied to the bounce chunk; the mutex is released
// for the part's I/O. So the I/O thread never reads a buffer's memory
// without the mutex, and nothing waits for a write-behind: a buffer that
// leaves the host meanwhile (filled, spilled, unregistered) sets
// write_stale (or is gone), and the write is abandoned at its next part or
// dropped at its end (as it is when the manager is being destroyed).
//
// Cost: one memcpy of each part under the mutex (the bounce chunk, at most
// 1 MiB: tens of microseconds), the I/O thread's time and disk bandwidth
// while the host tier is short; nothing on the acquire/release path.
#include <cstring>
#include <span>

#include "pinned_host_pool.hpp"
#include "residency_core.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

std::uint64_t residency_core::writeback_candidate() {
  if (!writes_.on()) return 0;
  std::uint64_t freeable = accounts_.c.shadow_bytes;
  std::uint64_t best = 0;
  std::uint64_t best_key = 0;
  std::size_t best_bytes = 0;
  for (auto& [handle, b] : buffers_) {
    if (b.where != tier::host) continue;
    if (b.kept_extent) {
      freeable += b.bytes;  // freed with no write when the host needs it
      continue;
    }
    if (b.no_writeback || b.acquired > 0 || !may_leave(b.policy, tier::host)) continue;
    const std::uint64_t key = order_.key(handle, b.released_at);
    if (best == 0 || key > best_key) {
      best = handle;
      best_key = key;
      best_bytes = b.bytes;
    }
  }
  if (best == 0 || !writes_.host_short(host_->stats().in_use_bytes, freeable)) return 0;
  if (!writes_.nvme_room(nvme_->stats().space_bytes, nvme_->span_of(best_bytes))) return 0;
  return best;
}

void residency_core::write_behind(std::unique_lock<std::recursive_mutex>& lock,
                                  std::uint64_t handle) {
  buffer& b = buffers_.at(handle);
  b.write_stale = false;
  const std::size_t bytes = b.bytes;
  auto extent = nvme_->begin_write(bytes);
  status st = extent ? status{} : extent.error();
  bool stale = false;
  std::size_t written = 0;
  const std::span<unsigned char> bounce = writes_.bounce();
  for (std::size_t at = 0; st && at < bytes; at += bounce.size()) {
    // Still the buffer's host copy? (Checked under the mutex, with the copy.)
    auto it = buffers_.find(handle);
    stale = it == buffers_.end() || it->second.write_stale || stopping_;
    if (stale) break;
    const std::size_t part = std::min(bounce.size(), bytes - at);
    std::memcpy(bounce.data(), static_cast<const unsigned char*>(it->second.host) + at, part);
    lock.unlock();
    st = nvme_->write_part(*extent, bounce.data(), part);  // a failed part frees the extent
    lock.lock();
    if (st) written += part;
  }
  const bool complete = written == bytes;
  if (complete && !stale && verify_nvme_) {
    lock.unlock();
    st = nvme_->verify(*extent);
    lock.lock();
  }
  auto it = buffers_.find(handle);
  stale = stale || it == buffers_.end() || it->second.write_stale;
  if (st && !stale) {
    it->second.extent = *extent;
    keep_extent(it->second);
    ++accounts_.c.writebacks;
    accounts_.c.writeback_bytes += bytes;
    return;
  }
  if (complete) {
    (void)nvme_->erase(*extent);
  } else if (st) {  // stopped early (a failed part has freed it already)
    (void)nvme_->abandon_write(*extent);
  }
  // A failing disk or a full store: the buffer stays on the host and is
  // not tried again until it is spilled there anew (no busy loop).
  if (!st && it != buffers_.end()) it->second.no_writeback = true;
  ++accounts_.c.writebacks_dropped;
}

}  // namespace strata
