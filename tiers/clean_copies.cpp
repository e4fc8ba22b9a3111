// The copies the residency manager keeps of unwritten buffers
// (residency.hpp, access_mode::read_only), so that spilling one moves no
// bytes:
//   the shadow       the pinned host copy a device buffer was filled from;
//                    spilling the buffer off the device frees the device
//                    memory, and the shadow becomes its host copy.
//   the kept extent  the NVMe extent a buffer was read from, kept while the
//                    buffer lives on the host or the device; spilling it
//                    to NVMe frees that memory with no write (and no
//                    read-back: the extent was checked when written, and
//                    every read checks its checksum).
//
// Invariants: `shadow` is set only for a buffer on the device with `dirty`
// false; `kept_extent` only for a buffer not on NVMe that is unwritten
// since it was read from `extent`. A read_write acquire (mark_written)
// frees both, as does dropping the buffer.
//
// Cost: nothing on the acquire/release path beyond a branch. Host pressure
// frees shadows first (the device copy stays, nothing moves); an NVMe store
// out of space frees kept extents before a write fails.
#include "pinned_host_pool.hpp"
#include "residency_core.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

void residency_core::drop_shadow(buffer& b) {
  b.dirty = true;
  if (b.shadow == nullptr) return;
  host_->free(b.shadow);
  b.shadow = nullptr;
  accounts_.c.shadow_bytes -= b.bytes;
}

bool residency_core::drop_a_shadow(std::size_t for_bytes) {
  if (accounts_.c.shadow_bytes == 0) return false;
  buffer* any = nullptr;
  for (auto& [handle, b] : buffers_) {
    if (b.shadow == nullptr) continue;
    if (for_bytes > 0 && host_->serves(b.bytes, for_bytes)) {
      drop_shadow(b);  // its pinned memory serves the allocation as it is
      return true;
    }
    if (any == nullptr) any = &b;
  }
  if (any == nullptr) return false;
  drop_shadow(*any);
  return true;
}

void residency_core::keep_extent(buffer& b) {
  b.kept_extent = true;
  accounts_.c.nvme_kept_bytes += b.bytes;
}

void residency_core::drop_kept_extent(buffer& b) {
  if (!b.kept_extent) return;
  (void)nvme_->erase(b.extent);
  b.kept_extent = false;
  accounts_.c.nvme_kept_bytes -= b.bytes;
}

bool residency_core::drop_a_kept_extent() {
  if (accounts_.c.nvme_kept_bytes == 0) return false;
  for (auto& [handle, b] : buffers_) {
    if (b.kept_extent) {
      drop_kept_extent(b);
      return true;
    }
  }
  return false;
}

void residency_core::mark_written(buffer& b) {
  drop_shadow(b);
  drop_kept_extent(b);
}

bool residency_core::spill_clean(buffer& b) {
  if (b.where == tier::device && !b.dirty && b.shadow != nullptr) {
    // The device-wide free waits for the work queued on the buffer.
    (void)alloc_.try_free(b.device);
    b.device = nullptr;
    b.host = b.shadow;
    b.shadow = nullptr;
    accounts_.c.shadow_bytes -= b.bytes;
    b.dirty = true;
    moved(b, tier::host, accounts_.c.spills_to_host, false);
  } else if (b.kept_extent && (b.where == tier::device || b.where == tier::host)) {
    if (b.where == tier::device) {
      (void)alloc_.try_free(b.device);
      b.device = nullptr;
    } else {
      host_->free(b.host);
      b.host = nullptr;
    }
    b.kept_extent = false;  // the extent is the buffer's home again
    accounts_.c.nvme_kept_bytes -= b.bytes;
    moved(b, tier::nvme, accounts_.c.spills_to_nvme, false);
  } else {
    return false;
  }
  ++accounts_.c.clean_spills;
  return true;
}

}  // namespace strata
