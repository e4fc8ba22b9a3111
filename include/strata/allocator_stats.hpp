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
//   num_locked_calls,              allocations and frees that took the lock,
//   locked_call_ns                 and their wall time (the host's cost of
//                                  the allocator beyond its fast path)
// Cost: updates are a few integer operations, no allocation.
//
// Thread safety: a plain value; the allocator serializes its own copy and
// hands callers a snapshot (strata::allocator::counters()).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "strata/counter_list.hpp"
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

/// The stat arrays (see the top of this file), by their PyTorch names.
#define STRATA_ALLOCATOR_STAT_ARRAYS(X)                           \
  X(allocation, "blocks handed to callers, not yet freed")        \
  X(segment, "physical pages held")                               \
  X(active, "allocated blocks and freed ones awaiting events")    \
  X(inactive_split, "free blocks inside mapped pages")            \
  X(allocated_bytes, "bytes of allocation")                       \
  X(reserved_bytes, "bytes of segment")                           \
  X(active_bytes, "bytes of active")                              \
  X(inactive_split_bytes, "mapped bytes not under active blocks") \
  X(requested_bytes, "the callers' sizes of allocated blocks")
/// The plain counters (counter_list.hpp), by their PyTorch names.
#define STRATA_ALLOCATOR_COUNTERS(X)                                        \
  X(num_alloc_retries, "allocations retried after freeing cached memory")   \
  X(num_ooms, "allocations that failed")                                    \
  X(num_sync_all_streams, "device synchronizations for frees")              \
  X(num_device_alloc, "physical runs created")                              \
  X(num_device_free, "physical runs released")                              \
  X(num_stitches, "requests backed partly by pages moved from holes")       \
  X(stitched_bytes, "bytes of those moved pages")                           \
  X(num_device_waits,                                                       \
    "waits for device work inside the allocator's calls (events, "          \
    "device synchronizations)")                                             \
  X(device_wait_ns, "their time in ns on the device's host_clock")          \
  X(num_locked_calls,                                                       \
    "allocations and frees the thread caches did not serve (they took the " \
    "allocator's lock)")                                                    \
  X(locked_call_ns, "their wall time in ns, the wait for the lock included")

struct STRATA_API allocator_stats {
#define STRATA_STAT_ARRAY_MEMBER(name, what) stat_array name;
  STRATA_ALLOCATOR_STAT_ARRAYS(STRATA_STAT_ARRAY_MEMBER)
#undef STRATA_STAT_ARRAY_MEMBER
  STRATA_ALLOCATOR_COUNTERS(STRATA_SIGNED_COUNTER_MEMBER)
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
