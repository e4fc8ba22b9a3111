// Large pinned host buffers, one device allocation each (cuMemHostAlloc on
// cuda, plain host memory on sim), so a freed buffer can go back to the
// device whole and nothing fragments: pinned memory cannot be remapped the
// way device pages are stitched, and an arena carving 2-60 MiB buffers out
// of shared chunks held 13-22% more than it handed out on the bundled traces.
//
// Freed buffers are kept for reuse. A request takes the smallest kept
// buffer of at least its size and at most 1/16 more, else a new one from
// the device, for which the oldest kept buffers go back first while the
// new one would not fit within the bounds the caller gives (the pinned host
// pool: its capacity, and its peak of bytes in use plus `host_kept`).
// Costs: a map lookup per take and give; a device call only when nothing
// kept fits or a kept buffer is released. Those calls are why buffers are
// kept: `cuMemHostAlloc` pins page by page, and `cuMemFreeHost` may wait
// for the whole device, so a tier that gave each freed buffer back paid
// both for every buffer it moved.
//
// Thread safety: none; the pinned host pool calls it under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "strata/device.hpp"

namespace strata {

class pinned_block_cache {
 public:
  /// Buffers come from `dev`, which must outlive the cache.
  explicit pinned_block_cache(device& dev) : dev_(dev) {}
  pinned_block_cache(const pinned_block_cache&) = delete;
  pinned_block_cache& operator=(const pinned_block_cache&) = delete;
  pinned_block_cache(pinned_block_cache&&) = delete;
  pinned_block_cache& operator=(pinned_block_cache&&) = delete;
  /// Every buffer, live or kept, goes back to the device.
  ~pinned_block_cache();

  /// `bytes` rounded up to whole 4 KiB pages: what a buffer of `bytes` pins.
  static std::size_t rounded(std::size_t bytes) noexcept {
    return (bytes + 4095) & ~std::size_t{4095};
  }

  /// A pinned buffer of at least `bytes`: a kept one, else a new one. A
  /// new one must add at most `room` pinned bytes, and should add at most
  /// `within`: kept buffers are released, oldest first, while it does not
  /// fit in either (and all of them when the device refuses). Null when
  /// nothing fits in `room` or the device has no more pinned memory.
  void* take(std::size_t bytes, std::uint64_t room, std::uint64_t within);
  /// The pinned size of live buffer `p` (from take), 0 if it is not one.
  [[nodiscard]] std::size_t live_size(const void* p) const;
  /// Keeps live buffer `p` for reuse (the pinned bytes do not change).
  void give(void* p);
  /// Releases the oldest kept buffers until at most `keep` bytes are kept.
  void trim(std::uint64_t keep);

  /// Pinned bytes held: live and kept buffers.
  [[nodiscard]] std::uint64_t pinned() const noexcept { return live_bytes_ + kept_bytes_; }
  /// Bytes of the kept buffers.
  [[nodiscard]] std::uint64_t kept() const noexcept { return kept_bytes_; }
  /// Buffers taken from the device, and given back to it, so far.
  [[nodiscard]] std::uint64_t device_allocations() const noexcept { return allocations_; }
  [[nodiscard]] std::uint64_t device_releases() const noexcept { return releases_; }

 private:
  struct kept_buffer {
    void* ptr;
    std::size_t bytes;
  };
  // Releases the oldest kept buffer (one device call).
  void release_oldest();

  device& dev_;
  std::unordered_map<const void*, std::size_t> live_;  // buffer -> pinned bytes
  std::map<std::uint64_t, kept_buffer> kept_;          // by age: when it was given
  std::multimap<std::size_t, std::uint64_t> by_size_;  // kept: bytes -> age
  std::uint64_t clock_ = 0;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t kept_bytes_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t releases_ = 0;
};

}  // namespace strata
