// The residency manager's counters (residency_manager::stats()), named
// once (strata/counter_list.hpp).
//
// Thread safety: a value.
#pragma once

#include "strata/counter_list.hpp"
#include "strata/strata.hpp"

namespace strata {

/// The residency manager's counters (counter_list.hpp): the "offload"
/// section of the allocator's stats and memory_summary().
#define STRATA_RESIDENCY_COUNTERS(X)                                           \
  X(device_bytes, "bytes of buffers on the device now")                        \
  X(host_bytes, "bytes of buffers in host memory now")                         \
  X(nvme_bytes, "bytes of buffers on NVMe now")                                \
  X(spills_to_host, "buffers spilled device -> host")                          \
  X(spills_to_nvme, "buffers spilled to NVMe")                                 \
  X(fills_from_host, "buffers filled host -> device")                          \
  X(fills_from_nvme, "buffers filled from NVMe")                               \
  X(bytes_moved, "bytes moved between tiers")                                  \
  X(bytes_to_host, "spilled device -> host")                                   \
  X(bytes_to_nvme, "spilled host or device -> NVMe")                           \
  X(bytes_from_nvme, "filled NVMe -> host or device")                          \
  X(bytes_from_host, "filled host -> device")                                  \
  X(staging_bytes, "host memory of fills still in flight")                     \
  X(fill_wait_ns, "time callers spent in fills (I/O, waits)")                  \
  X(prefetch_reads, "NVMe reads issued by prefetch()")                         \
  X(prefetch_copies, "host-to-device copies issued by prefetch()")             \
  X(prefetch_hits,                                                             \
    "acquires of prefetched buffers done by the time the stream needed "       \
    "them (it waited at most 50 us)")                                          \
  X(late_fills,                                                                \
    "acquires the stream had to wait for: fills started at the acquire, and "  \
    "prefetches still in flight when the stream got to them")                  \
  X(stall_ns,                                                                  \
    "time consuming streams waited for late fills (host functions around the " \
    "wait), plus acquires' waits for reads in flight")                         \
  X(prefetch_wasted, "prefetched buffers spilled before use")                  \
  X(host_holds, "acquire_host holds taken")                                    \
  X(host_holds_read,                                                           \
    "of them, those that read the buffer from NVMe themselves (no read "       \
    "ahead had started)")                                                      \
  X(prefetch_wasted_bytes, "their bytes")                                      \
  X(prefetch_no_room, "prefetches not issued for lack of memory")              \
  X(prefetch_failed, "prefetch reads that failed (reported at acquire)")       \
  X(fills_in_flight, "reads and copies outstanding now")                       \
  X(prefetched_bytes, "headed for the device by prefetch, not acquired")       \
  X(clean_spills,                                                              \
    "spills of unwritten buffers to a copy kept below: no copy back, no "      \
    "write")                                                                   \
  X(shadow_bytes, "host copies kept for unwritten device buffers")             \
  X(nvme_kept_bytes, "NVMe extents kept for unwritten buffers above")          \
  X(writebacks, "host buffers given an NVMe copy in the background")           \
  X(writeback_bytes, "their bytes (written to NVMe)")                          \
  X(writebacks_dropped,                                                        \
    "write-behinds whose extent was dropped: the write failed (the "           \
    "buffer stays on the host, not tried again until it moves there "          \
    "anew), or the buffer was written or spilled while it ran")
struct residency_counters {
  STRATA_RESIDENCY_COUNTERS(STRATA_COUNTER_MEMBER)
  /// The counters by name (the "offload" stats section).
  [[nodiscard]] stat_map to_map() const {
    return {STRATA_RESIDENCY_COUNTERS(STRATA_COUNTER_ENTRY)};
  }
};

}  // namespace strata
