// The residency manager: managed buffers that live on the device when in
// use and move to pinned host memory, then to NVMe, when memory is needed.
//
//   register_buffer(bytes, kind, policy) -> handle (no storage yet)
//   acquire(handle, stream) -> a device pointer valid on `stream`, filled
//       back from host or NVMe if the buffer was spilled (first acquire:
//       fresh device memory, contents undefined)
//   release(handle, stream) -> evictable once `stream` has done the work
//       queued before the release
//   unregister(handle)
//
// Spills go device -> host -> NVMe, fills the other way, bytes exact. A
// buffer the host tier cannot hold (even after spilling host buffers on to
// NVMe) streams device <-> NVMe through two pinned staging chunks instead
// (the copy of one chunk overlaps the I/O of the other): host capacity
// limits what is kept on the host, not what can move. A
// buffer leaves a tier only after its copy in the next one is complete: the
// device-to-host copy is synchronized before the device block is freed, the
// NVMe write has returned (checksum written with it) and been read back and
// checked (verify_nvme, on by default) before the host copy is freed, and an
// NVMe read is checked against its checksum before use. Any
// failure on the way leaves the buffer where it was.
//
// Eviction picks among released, evictable buffers (policy `evictable`) the
// least recently released, or the one the oracle (set_eviction_oracle) says
// is needed last. The manager registers a pressure handler with the
// allocator, so an allocation that would fail anywhere spills released
// buffers first.
//
// Device memory comes from a strata::allocator (device-wide malloc/free);
// copies run on the manager's own two streams, one per direction, so a
// spill does not queue behind fills. Spills wait for their copy. Fills
// are stream-ordered: the host-to-device copy is queued with an event the
// acquiring stream waits on, so acquire returns at once and the bytes are
// there for work queued on that stream afterwards; the host memory of a
// fill is given back once its event is done (checked at every call, waited
// for when host memory is short).
//
// Thread safety: every member may be called concurrently; one recursive
// mutex serializes them (the pressure handler may re-enter from an
// allocation the manager itself makes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "strata/allocator_options.hpp"
#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/strata.hpp"

namespace strata {

class io_faults;
class nvme_store;
class pinned_host_pool;

enum class buffer_kind : std::uint8_t { parameter, gradient, optimizer_state, other };
enum class residency_policy : std::uint8_t {
  evictable,        ///< may be spilled while released
  pinned_on_device  ///< never spilled
};
enum class tier : std::uint8_t { none, device, host, nvme };

class STRATA_API residency_manager {
 public:
  /// A manager over `alloc` (which must outlive it), its tiers set by the
  /// offload options (STRATA_CONF's host_* and nvme_* keys; an empty
  /// nvme_dir: no NVMe tier). Errors: invalid_argument for options outside
  /// their ranges (check_allocator_options), those of the host pool
  /// (not_supported when jemalloc cannot load) and of the NVMe store.
  /// `nvme_faults` (tests) sees every NVMe request and must outlive it.
  static result<std::unique_ptr<residency_manager>> create(allocator& alloc,
                                                           const offload_options& options,
                                                           io_faults* nvme_faults = nullptr);
  residency_manager(const residency_manager&) = delete;
  residency_manager& operator=(const residency_manager&) = delete;
  residency_manager(residency_manager&&) = delete;
  residency_manager& operator=(residency_manager&&) = delete;
  /// Unregisters the pressure handler and frees every buffer.
  ~residency_manager();

  /// A new buffer of `bytes` (> 0, at most the device's memory); no storage
  /// until the first acquire. Errors: invalid_argument (0, larger than the
  /// device).
  result<std::uint64_t> register_buffer(std::size_t bytes, buffer_kind kind,
                                        residency_policy policy);
  /// The buffer on the device, valid for work queued on `stream` from now
  /// on (see above). Errors: invalid_argument (unknown handle, a stream the
  /// device does not know),
  /// out_of_memory (nothing left to spill), io_error and device errors from
  /// a fill (the buffer stays where it was).
  result<void*> acquire(std::uint64_t handle, void* stream);
  /// Ends one acquire; the buffer is evictable once no acquire is left and
  /// `stream`'s work up to now is done. Errors: invalid_argument (unknown
  /// handle, not acquired, unknown stream), device errors.
  status release(std::uint64_t handle, void* stream);
  /// Frees the buffer wherever it is. Errors: invalid_argument (unknown, or
  /// still acquired).
  status unregister(std::uint64_t handle);
  /// Where the buffer is now. Errors: invalid_argument (unknown handle).
  [[nodiscard]] result<tier> where(std::uint64_t handle);

  /// `next_use(handle)` = how far ahead the buffer is needed (larger: spill
  /// first); null restores least-recently-released.
  void set_eviction_oracle(std::function<std::uint64_t(std::uint64_t handle)> next_use);
  /// Spills released buffers off the device until `bytes` are freed (or
  /// none is left); returns the bytes freed. The pressure handler.
  std::size_t spill(std::size_t bytes);

  struct counters {
    std::uint64_t device_bytes = 0;
    std::uint64_t host_bytes = 0;
    std::uint64_t nvme_bytes = 0;
    std::uint64_t spills_to_host = 0;
    std::uint64_t spills_to_nvme = 0;
    std::uint64_t fills_from_host = 0;
    std::uint64_t fills_from_nvme = 0;
    std::uint64_t bytes_moved = 0;
    std::uint64_t staging_bytes = 0;  ///< host memory of fills still in flight
    std::uint64_t fill_wait_ns = 0;   ///< time callers spent in fills (I/O, waits)
  };
  [[nodiscard]] counters stats();

 private:
  struct buffer {
    std::size_t bytes;
    buffer_kind kind;
    residency_policy policy;
    tier where = tier::none;
    void* device = nullptr;
    void* host = nullptr;
    std::uint64_t extent = 0;
    unsigned acquired = 0;
    std::uint64_t released_at = 0;  // tick of the last release
    event_handle released{};        // recorded on the releasing stream
    bool has_release_event = false;
    void* staging = nullptr;  // host memory of a fill in flight
    event_handle filled{};    // recorded on the fill stream after a fill
    bool has_fill_event = false;
  };

  residency_manager(allocator& alloc, std::unique_ptr<pinned_host_pool> host,
                    std::unique_ptr<nvme_store> nvme, bool verify_nvme);
  // A released device (or host) buffer to move down, or null.
  buffer* victim(tier from);
  status spill_to_host(buffer& b);
  status spill_to_nvme(buffer& b);
  // The streamed paths (staged_transfer.cpp): device <-> NVMe through the
  // staging chunks, for buffers the host tier cannot hold.
  status stream_to_nvme(buffer& b);
  status stream_from_nvme(buffer& b, void* dev, void* stream);
  // Host memory for `bytes`, spilling host buffers to NVMe if needed.
  result<void*> host_memory(std::size_t bytes);
  status fill(buffer& b, void* stream);
  // Gives back the host memory of `b`'s finished fill (waiting for it if
  // `wait`); false if it is still in flight.
  bool retire(buffer& b, bool wait);
  void retire_finished();
  // Device memory for `bytes`, spilling released buffers while it is short.
  result<void*> device_memory(std::size_t bytes);
  // Copies on the spill stream and waits for the copy.
  status copy(void* dst, const void* src, std::size_t bytes, copy_direction direction,
              const event_handle* after);
  void drop(buffer& b);
  // Records that `b` now lives on `to`: the per-tier bytes, `count` (the
  // spill or fill counter) and the bytes moved.
  void moved(buffer& b, tier to, std::uint64_t& count);
  std::uint64_t& tier_bytes(tier t);

  allocator& alloc_;
  std::unique_ptr<pinned_host_pool> host_;
  std::unique_ptr<nvme_store> nvme_;
  bool verify_nvme_;
  stream_handle spill_stream_{};    // device-to-host copies, waited for
  stream_handle fill_stream_{};     // host-to-device copies, stream-ordered
  event_handle copy_done_{};        // a spill's copy
  std::size_t staging_chunk_ = 0;   // bytes per staging chunk (block multiple)
  event_handle staging_done_[2]{};  // the copy of each staging chunk
  std::recursive_mutex mu_;
  std::unordered_map<std::uint64_t, buffer> buffers_;
  std::uint64_t next_handle_ = 1;
  std::uint64_t tick_ = 0;
  std::function<std::uint64_t(std::uint64_t)> oracle_;
  counters stats_;
  std::uint64_t handler_ = 0;
};

}  // namespace strata
