// The allocator's counters, named like torch.cuda.memory_stats().
//
// Each `stat` has current, peak, allocated (sum of increases) and freed (sum
// of decreases). Each stat_array has one stat per pool: all, small_pool
// (requests <= small_size), large_pool. Definitions, in Strata's terms:
//   allocation / allocated_bytes   blocks handed to callers and not yet freed
//   active / active_bytes          allocated blocks plus freed blocks still
//                                  waiting on events before reuse
//   requested_bytes                the callers' sizes of allocated blocks
//   segment / reserved_bytes       physical pages the allocator holds: .all
//                                  counts every page (mapped or idle in the
//                                  page pool); small/large count the pages
//                                  mapped into arenas of that kind
//   inactive_split(_bytes)         free blocks inside mapped pages, and the
//                                  mapped bytes not covered by active blocks;
//                                  derived, so their peaks are sampled when
//                                  pages are mapped and when stats are read
//   driver                         the allocator's device's driver calls by
//                                  kind, with their time (device.hpp)
//   device_wait_ns                 time the allocator's own calls (allocate,
//                                  free, trim) spent waiting for device work
// Cost: updates are a few integer operations, no allocation.
//
// Thread safety: a plain value; the allocator serializes its own copy and
// hands callers a snapshot (strata::allocator::counters()).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "strata/device.hpp"
#include "strata/export.hpp"

namespace strata {

struct stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void increase(std::int64_t n) noexcept {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t n) noexcept {
    current -= n;
    freed += n;
  }
  /// Adds a batch of `allocated` increases and `freed` decreases whose net is
  /// `net` (the peak only sees the net).
  void fold(std::int64_t net, std::int64_t plus_allocated, std::int64_t plus_freed) noexcept {
    current += net;
    allocated += plus_allocated;
    freed += plus_freed;
    if (current > peak) peak = current;
  }
  /// Moves `current` to `value`, counting the change as an increase or decrease.
  void set(std::int64_t value) noexcept {
    if (value > current) increase(value - current);
    if (value < current) decrease(current - value);
  }
};

enum stat_pool : std::uint8_t { pool_all = 0, pool_small = 1, pool_large = 2 };

struct stat_array {
  std::array<stat, 3> pools;
  /// Applies `n` (may be negative) to .all and to `pool`.
  void add(stat_pool pool, std::int64_t n) noexcept {
    for (auto p : {pool_all, pool}) {
      if (n >= 0) {
        pools[p].increase(n);
      } else {
        pools[p].decrease(-n);
      }
    }
  }
  stat& operator[](stat_pool p) noexcept { return pools[p]; }
  const stat& operator[](stat_pool p) const noexcept { return pools[p]; }
};

struct STRATA_API allocator_stats {
  stat_array allocation;
  stat_array segment;
  stat_array active;
  stat_array inactive_split;
  stat_array allocated_bytes;
  stat_array reserved_bytes;
  stat_array active_bytes;
  stat_array inactive_split_bytes;
  stat_array requested_bytes;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::int64_t num_stitches = 0;    // requests backed partly by pages moved from holes
  std::int64_t stitched_bytes = 0;  // bytes of those moved pages
  /// Waits for device work inside the allocator's calls (events, device
  /// synchronizations), and their time in ns on the device's host_clock.
  std::int64_t num_device_waits = 0;
  std::int64_t device_wait_ns = 0;
  /// The device's driver calls by kind (the whole device's: the layers
  /// above that use it are counted too), filled in when stats are read.
  driver_call_totals driver{};

  /// GMLake's fragmentation: 1 - allocated / reserved, of the current
  /// values and of the peaks (0 when nothing is reserved).
  [[nodiscard]] double fragmentation() const noexcept;
  [[nodiscard]] double peak_fragmentation() const noexcept;

  /// Sets every peak to its current value.
  void reset_peaks() noexcept;
  /// Every counter by its PyTorch-style name, e.g.
  /// "allocated_bytes.all.current", "num_ooms"; fragmentation as
  /// "fragmentation_ppm.current" and "fragmentation_ppm.peak" (parts per
  /// million); driver calls as "driver_calls.<kind>" and
  /// "driver_time_ns.<kind>" (kinds as driver_call_name names them, and
  /// "all").
  [[nodiscard]] std::map<std::string, std::int64_t> to_map() const;
};

}  // namespace strata
