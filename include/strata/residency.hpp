// The residency manager: buffers that live on the device while in use and
// move to pinned host memory, then to NVMe, when memory is needed.
//
//   register_buffer(bytes, kind, policy) -> handle (no storage yet)
//   acquire(handle, stream) -> a device pointer valid on `stream`, filled
//       back from host or NVMe if the buffer was spilled (first acquire:
//       fresh device memory, contents undefined)
//   release(handle, stream) -> evictable once `stream` has done the work
//       queued before the release
//   prefetch(handle, tier) -> the fill started ahead, never waited for
//   unregister(handle)
//
// Nothing is lost: a buffer leaves a tier only after its copy in the next
// one is complete and verified (an NVMe write is read back and checked
// unless nvme_verify is off; every NVMe read is checked against its
// checksum); any failure leaves it where it was. Eviction takes the
// released buffer the oracle says is needed last (else the least recently
// released) that its policy lets go. The manager registers a pressure
// handler with the allocator (an allocation that would fail spills
// released buffers first) and the "offload" stats section. How it does all
// this: tiers/residency_core.hpp.
//
// Thread safety: every member may be called concurrently (one mutex
// serializes them inside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/residency.h"
#include "strata/residency_counters.hpp"
#include "strata/residency_types.hpp"
#include "strata/strata.hpp"
#include "strata/tier_options.hpp"

namespace strata {

class io_faults;
class residency_core;

class STRATA_API residency_manager {
 public:
  /// A manager over `alloc` (which must outlive it), its tiers set by
  /// `options` (STRATA_CONF's tiers section; an empty nvme_dir: no NVMe
  /// tier). Errors: invalid_argument for options outside their ranges
  /// (check_tier_options), and those of the NVMe store.
  /// `nvme_faults` (tests) sees every NVMe request and must outlive it.
  static result<std::unique_ptr<residency_manager>> create(allocator& alloc,
                                                           const tier_options& options,
                                                           io_faults* nvme_faults = nullptr);
  residency_manager(const residency_manager&) = delete;
  residency_manager& operator=(const residency_manager&) = delete;
  residency_manager(residency_manager&&) = delete;
  residency_manager& operator=(residency_manager&&) = delete;
  /// Unregisters the pressure handler and frees every buffer.
  ~residency_manager();

  /// A new buffer of `bytes` (> 0, at most the device's memory); no storage
  /// until the first acquire. Errors: invalid_argument (0, larger than the
  /// device, `nvme_home` without an NVMe tier).
  result<std::uint64_t> register_buffer(std::size_t bytes, buffer_kind kind,
                                        residency_policy policy);
  /// The buffer on the device, valid for work queued on `stream` from now
  /// on (see above); if it was last released on another stream, `stream`
  /// first waits for the work queued there before that release. `mode`:
  /// whether the work may write it (see access_mode). Errors:
  /// invalid_argument (unknown handle, a stream the device does not know),
  /// out_of_memory (nothing left to spill), io_error and device errors from
  /// a fill (the buffer stays where it was).
  result<void*> acquire(std::uint64_t handle, void* stream,
                        access_mode mode = access_mode::read_write);
  /// Ends one acquire; the buffer is evictable once no acquire is left and
  /// `stream`'s work up to now is done. The last release of an `nvme_home`
  /// buffer also writes it to NVMe (after `stream`'s work; verified unless
  /// nvme_verify is off) and returns when it is there; an unwritten one
  /// moves no bytes. Errors: invalid_argument (unknown handle, not
  /// acquired, unknown stream), device errors; for `nvme_home` the write's
  /// (io_error, out_of_memory: the release is done, the buffer stays where
  /// it was).
  status release(std::uint64_t handle, void* stream);
  /// The buffer's bytes in pinned host memory, for the host's own work (an
  /// optimizer step on host threads): the buffer comes up to the host tier
  /// (read from NVMe and checked, or copied off the device after the work
  /// its releasing stream queued; a buffer never used gets fresh host
  /// memory, contents undefined) and stays there, neither spilled nor
  /// prefetched, until release_host. Holds nest. `mode` read_write: the
  /// copies below (a kept NVMe extent) are dropped, the host writes the
  /// bytes; overwrite: a buffer on NVMe is not read either (fresh host
  /// memory, contents undefined). Blocks until the bytes are there. Errors: invalid_argument
  /// (unknown handle, a `pinned_on_device` buffer, one acquired on the
  /// device), out_of_memory (the host tier cannot hold it; the buffer
  /// stays where it was, or one tier down when the host could not take it
  /// off the device), io_error (a read failed its checksum; it stays on
  /// NVMe).
  result<void*> acquire_host(std::uint64_t handle, access_mode mode = access_mode::read_write);
  /// Ends one acquire_host; the last makes the buffer movable again (an
  /// `nvme_home` buffer goes home to NVMe now, as at release). Errors:
  /// invalid_argument (unknown handle, not acquired on the host), the
  /// write's for `nvme_home`.
  status release_host(std::uint64_t handle);
  /// Frees the buffer wherever it is. Errors: invalid_argument (unknown, or
  /// still acquired, on the device or the host).
  status unregister(std::uint64_t handle);
  /// Where the buffer is now. Errors: invalid_argument (unknown handle).
  [[nodiscard]] result<tier> where(std::uint64_t handle);
  /// The buffer's size in bytes. Errors: invalid_argument (unknown handle).
  [[nodiscard]] result<std::size_t> size_of(std::uint64_t handle);

  /// Starts moving the buffer towards `to` (tier::host or tier::device)
  /// without waiting for anything: an NVMe read on the reader thread, a
  /// host-to-device copy on the fill stream, or both in turn. `next_use`
  /// (the oracle's unit) bounds what may be spilled to make device room:
  /// only buffers the oracle says are needed later than that. The next
  /// acquire of the buffer waits for the fill in stream order (for a read
  /// still in flight: on the acquiring thread) and reports a failed read.
  /// Errors: invalid_argument (unknown handle, `to` not host or device),
  /// device errors queueing a copy (nothing issued).
  result<prefetch_outcome> prefetch(std::uint64_t handle, tier to, std::uint64_t next_use,
                                    prefetch_limits limits = {});

  /// Returns once every NVMe read prefetch() queued before the call has
  /// ended (a failed one is reported by the buffer's next acquire, not
  /// here). On a timing-only device the calling thread's modeled clock
  /// moves to the last read's end: a step that issued reads ends when the
  /// disk has delivered them. Must not be called from a pressure handler
  /// or the eviction oracle.
  void wait_for_reads();

  /// `next_use(handle)` = how far ahead the buffer is needed (larger: spill
  /// first); buffers with next_use <= `keep_within` are spilled only when
  /// no other is left. The oracle is called under the manager's mutex, from
  /// any thread that spills: it must not call the manager. Null restores
  /// least-recently-released.
  void set_eviction_oracle(std::function<std::uint64_t(std::uint64_t handle)> next_use,
                           std::uint64_t keep_within = 0);
  /// Spills released buffers off the device until `bytes` are freed (or
  /// none is left); returns the bytes freed. The pressure handler.
  std::size_t spill(std::size_t bytes);

  /// The counters (strata/residency_counters.hpp).
  using counters = residency_counters;
  [[nodiscard]] counters stats();
  /// The allocator the buffers' device memory comes from.
  [[nodiscard]] allocator& device_allocator() const noexcept;
  /// tier_options::host_lookahead it was made with: how far ahead, in
  /// bytes of upcoming acquires, a prefetcher reads NVMe into host memory.
  [[nodiscard]] std::uint64_t host_lookahead() const noexcept;
  /// tier_options::host_capacity it was made with (bytes; 0: no limit).
  [[nodiscard]] std::uint64_t host_capacity() const noexcept;

 private:
  explicit residency_manager(std::unique_ptr<residency_core> core);

  std::unique_ptr<residency_core> core_;  // tiers/residency_core.hpp
};

namespace c_api {

/// The manager behind a C handle (strata/residency.h), counted as in use
/// until give_back(): strata_residency_destroy refuses while any borrow is
/// left (the prefetcher's C API holds one). Null for a null or destroyed
/// handle. Thread safety: atomics; may race with destroy.
STRATA_API residency_manager* borrow(strata_residency* handle);
/// Ends one borrow() of `handle`.
STRATA_API void give_back(strata_residency* handle);
/// The access mode a C caller named (by reference: copying an out-of-range
/// enum is already undefined). Errors: invalid_argument (not a
/// strata_access_mode value).
STRATA_API result<access_mode> access_mode_of(const strata_access_mode& mode);

}  // namespace c_api

}  // namespace strata
