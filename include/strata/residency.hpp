// The residency manager: managed buffers that live on the device when in
// use and move to pinned host memory, then to NVMe, when memory is needed.
//
//   register_buffer(bytes, kind, policy) -> handle (no storage yet)
//   acquire(handle, stream) -> a device pointer valid on `stream`, filled
//       back from host or NVMe if the buffer was spilled (first acquire:
//       fresh device memory, contents undefined), ordered after the work
//       queued before the last release when that was on another stream
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
// failure on the way leaves the buffer where it was. A buffer only read
// since it was filled (access_mode::read_only) keeps the copies it came
// from (host memory, its NVMe extent) and spills back onto them with no
// copy (clean_copies.cpp).
//
// Eviction picks among released buffers its policy lets go there (device to
// host: `evictable` and `host_only`; host to NVMe: `evictable`) the
// least recently released, or the one the oracle (set_eviction_oracle) says
// is needed last; buffers the oracle says are needed within `keep_within`
// bytes go only when no other is left. The manager registers a pressure
// handler with the allocator, so an allocation that would fail anywhere
// spills released buffers first, and a stats source (the "offload" section
// of the allocator's stats() and memory_summary()).
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
// Write-behind: with a host capacity and an NVMe tier, while the host tier
// could not make `host_lookahead` bytes of room (at most its capacity)
// without a write, the I/O thread writes host buffers that have no NVMe
// copy to NVMe in the background (farthest next use first, when no read is
// queued) and keeps the extent, so pushing them off the host later is a
// free, not a write on the thread that needs the room (write_behind.cpp).
//
// Prefetch (prefetch()): a fill started ahead of the acquire, never waited
// for on the calling thread. A fetch is a pipeline of stages, each ordered
// after the one before: NVMe -> pinned host memory (a read on the manager's
// reader thread, checksum checked when it completes), then host -> device
// (a copy queued on the fill stream when the read is in); a buffer the host
// tier cannot hold streams NVMe -> device through two staging chunks on the
// reader thread. A failed read
// leaves the buffer on NVMe and is reported by the next acquire of it.
// Device memory for a prefetch is taken when its copy is queued, and only
// by spilling buffers the oracle says are needed later (without an oracle:
// none); when there is no room the prefetch is not issued (no_room).
//
// Thread safety: every member may be called concurrently; one recursive
// mutex serializes them (the pressure handler may re-enter from an
// allocation the manager itself makes). The I/O thread takes the same
// mutex only to take a job, to hand a finished read back, and to copy each
// part of a write-behind.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "strata/allocator_options.hpp"
#include "strata/counter_list.hpp"
#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/residency.h"
#include "strata/strata.hpp"

namespace strata {

class io_faults;
class nvme_store;
class pinned_host_pool;
class stall_probes;

enum class buffer_kind : std::uint8_t { parameter, gradient, optimizer_state, other };
enum class residency_policy : std::uint8_t {
  evictable,         ///< may be spilled while released, to host memory and on to NVMe
  pinned_on_device,  ///< never spilled
  host_only,         ///< may be spilled to host memory while released, never to NVMe
  nvme_home          ///< written to NVMe at its last release (evictable in between)
};
enum class tier : std::uint8_t { none, device, host, nvme };

/// Whether a released buffer under `policy` may be spilled from tier `from`:
/// from the device to host memory (`evictable`, `host_only`, `nvme_home`)
/// or from host memory to NVMe (`evictable`, `nvme_home`).
[[nodiscard]] constexpr bool may_leave(residency_policy policy, tier from) noexcept {
  if (policy == residency_policy::evictable || policy == residency_policy::nvme_home) return true;
  return policy == residency_policy::host_only && from == tier::device;
}

/// How an acquire uses the buffer.
enum class access_mode : std::uint8_t {
  read_write,  ///< may write it: a later spill copies the device bytes back
  /// Only reads it (forward and backward use of parameters): the host copy
  /// it was filled from and the NVMe extent it was read from stay valid, so
  /// a spill frees the device (or host) memory without copying back or
  /// writing. Writes made under a read_only acquire are lost at the next
  /// spill.
  read_only
};

/// What a prefetch() did.
enum class prefetch_outcome : std::uint8_t {
  resident,     ///< nothing to do: there already, on its way, acquired, or never filled
  started,      ///< a read or a copy was issued
  over_budget,  ///< it would pass the limits: nothing issued
  no_room       ///< no memory without spilling a buffer needed sooner: nothing issued
};

/// Limits a prefetch() keeps within (checked before it issues anything).
struct prefetch_limits {
  /// Most bytes headed for the device by prefetch and not yet acquired
  /// (fills in flight plus prefetched buffers), this one included.
  std::uint64_t device_bytes = std::numeric_limits<std::uint64_t>::max();
  /// Most fills outstanding (NVMe reads and device copies), this one included.
  std::uint64_t inflight = std::numeric_limits<std::uint64_t>::max();
};

class STRATA_API residency_manager {
 public:
  /// A manager over `alloc` (which must outlive it), its tiers set by the
  /// offload options (STRATA_CONF's host_* and nvme_* keys; an empty
  /// nvme_dir: no NVMe tier). Errors: invalid_argument for options outside
  /// their ranges (check_allocator_options), and those of the NVMe store.
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
  /// Frees the buffer wherever it is. Errors: invalid_argument (unknown, or
  /// still acquired).
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

  /// The counters (counter_list.hpp).
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
  struct counters {
    STRATA_RESIDENCY_COUNTERS(STRATA_COUNTER_MEMBER)
    /// The counters by name (the "offload" stats section).
    [[nodiscard]] stat_map to_map() const {
      return {STRATA_RESIDENCY_COUNTERS(STRATA_COUNTER_ENTRY)};
    }
  };
  [[nodiscard]] counters stats();
  /// The allocator the buffers' device memory comes from.
  [[nodiscard]] allocator& device_allocator() const noexcept {
    return alloc_;
  }

 private:
  struct buffer {
    std::size_t bytes;
    buffer_kind kind;
    residency_policy policy;
    tier where = tier::none;
    bool has_release_event = false;
    bool has_fill_event = false;
    bool reading = false;      // an NVMe read into `host` runs on the reader thread
    bool dirty = true;         // the device copy may differ from every host copy
    bool kept_extent = false;  // above NVMe, unwritten: `extent` still holds its bytes
    bool prefetched = false;   // headed for the device by prefetch(), not acquired
    // Write-behind (write_behind.cpp): set when the buffer leaves the host,
    // so a write-behind under way knows its copy is no longer the buffer's.
    bool write_stale = false;
    bool no_writeback = false;  // a write-behind failed: not tried until it is spilled anew
    unsigned acquired = 0;
    void* device = nullptr;
    void* host = nullptr;
    std::uint64_t extent = 0;
    std::uint64_t released_at = 0;  // tick of the last release
    event_handle released{};        // recorded on the releasing stream
    stream_handle released_on{};    // that stream
    void* staging = nullptr;        // host memory of a fill in flight
    event_handle filled{};          // recorded on the fill stream after a fill
    void* shadow = nullptr;         // on the device and clean: the host copy it came from
    std::uint64_t next_use = 0;     // the prefetch's, for making device room
    status read_failure{};          // a prefetch read's error, for the next acquire
    double read_done_at = 0;        // a prefetch read's end on the reader's modeled clock
  };
  struct read_job {
    std::uint64_t handle;
    std::uint64_t extent;
    void* host;  // the read's destination (the buffer's), or null when streamed
    std::size_t bytes;
    void* dev = nullptr;                  // streamed: straight to this device memory
    void* slots[2] = {nullptr, nullptr};  // streamed: the staging chunks
    double posted_at = 0;                 // the poster's modeled clock (timing-only devices)
  };

  residency_manager(allocator& alloc, std::unique_ptr<pinned_host_pool> host,
                    std::unique_ptr<nvme_store> nvme, bool verify_nvme);
  // A released device (or host) buffer to move down, or null; with
  // `limit`, only one the oracle says is needed later than it. Passes over
  // the buffers in `passed_over_`.
  buffer* victim(tier from, const std::uint64_t* limit = nullptr);
  // Spills the next device victim: host_only ones the host tier cannot take
  // now are passed over for the next. Null status with `*spilled` null: no
  // victim is left (the error of a passed-over one, if any, is returned).
  status spill_a_victim(const std::uint64_t* limit, buffer** spilled);
  // Which buffer goes first (larger: sooner): the oracle's next use, else
  // the least recently released. Shared by victim and write-behind.
  [[nodiscard]] std::uint64_t spill_order(std::uint64_t handle, const buffer& b) const;
  status spill_to_host(buffer& b);
  status spill_to_nvme(buffer& b);
  // An nvme_home buffer's last release: down to NVMe from where it is.
  status send_home(buffer& b);
  // The streamed paths (staged_transfer.cpp): device <-> NVMe through the
  // staging chunks, for buffers the host tier cannot hold.
  status stream_to_nvme(buffer& b);
  status stream_from_nvme(buffer& b, void* dev);
  // Reads `extent` chunk by chunk through `slots` into `dev` on `stream`
  // (`done`: one event per slot), checks the checksum and waits for the
  // copies. Touches no buffer state: the reader runs it without the mutex.
  status stream_in(std::uint64_t extent, void* dev, std::size_t bytes, void* const slots[2],
                   stream_handle stream, const event_handle done[2]);
  // Host memory for `bytes`, spilling host buffers to NVMe if needed.
  result<void*> host_memory(std::size_t bytes);
  // Fills `b` (on the host or NVMe) onto the device; the copy from the
  // host is queued (order_after_fill makes the acquirer wait for it).
  status fill(buffer& b);
  // Gives back the host memory of `b`'s finished fill (waiting for it if
  // `wait`); false if it is still in flight.
  bool retire(buffer& b, bool wait);
  void retire_finished();
  // Device memory for `bytes`, spilling released buffers (with `limit`, as
  // victim's) while it is short.
  result<void*> device_memory(std::size_t bytes, const std::uint64_t* limit = nullptr);
  // Queues the host-to-device copy of `b` (on the host) into `dev` and
  // makes `dev` the buffer's; the acquiring stream waits for `b.filled`.
  status queue_fill_copy(buffer& b, void* dev);
  // Makes the acquiring `stream` wait for `b`'s fill if it is in flight and
  // counts the acquire as a hit or a late fill (`late`: the acquire filled
  // it or waited for its read).
  status order_after_fill(buffer& b, stream_handle stream, bool late);
  // prefetch() but for waiting on a modeled tier's read. Needs mu_.
  result<prefetch_outcome> start_prefetch(std::uint64_t handle, tier to, std::uint64_t next_use,
                                          prefetch_limits limits);
  // Timing-only devices (docs/device.md, "Modeled time"): the calling
  // thread's modeled clock (0 elsewhere), and moving it up to `t` (a
  // hand-off between the manager's threads, or a wait for the reader).
  [[nodiscard]] double modeled_now() const;
  void modeled_wait_until(double t) const;
  // The prefetch stages (prefetch_fill.cpp): a read on the reader thread,
  // the copy to the device, the reader's loop and its hand-back.
  result<prefetch_outcome> start_read(std::uint64_t handle, buffer& b, bool to_device);
  // For a buffer the host tier cannot hold: device memory and two staging
  // chunks now, the read streamed to the device on the reader thread.
  result<prefetch_outcome> start_streamed_read(std::uint64_t handle, buffer& b);
  // Gives back what a streamed job holds (after a failure or at shutdown).
  void free_streamed(const read_job& job);
  result<prefetch_outcome> start_device_copy(buffer& b);
  // Whether a prefetch read may hold `more` host bytes: reads in flight are
  // no victims, so they leave an acquire's own fill the room of two staging
  // chunks, or it could find the host tier full of them.
  [[nodiscard]] bool reads_leave_room(std::uint64_t more) const;
  // The I/O thread: reads first, then write-behinds.
  void reader_loop();
  // The handle of the host buffer to write behind now, or 0 (none, or the
  // host tier has room enough). Needs mu_.
  std::uint64_t writeback_candidate();
  // Gives `handle`'s host copy an NVMe extent in parts through bounce_, the
  // mutex released during each part's I/O; kept if the buffer stayed on
  // the host, abandoned otherwise.
  void write_behind(std::unique_lock<std::recursive_mutex>& lock, std::uint64_t handle);
  void finish_read(const read_job& job, status read);
  // Waits (releasing the mutex) until `b`'s read is in; counts the wait.
  void wait_for_read(std::unique_lock<std::recursive_mutex>& lock, buffer& b);
  void set_prefetched(buffer& b, bool on);
  // The copies kept of unwritten buffers (clean_copies.cpp). Frees `b`'s
  // shadow (the buffer is then dirty: a spill off the device copies it).
  void drop_shadow(buffer& b);
  // Frees one shadow to make host room; false if there is none.
  bool drop_a_shadow();
  // Keeps `b.extent` after a read from it (the buffer is unwritten).
  void keep_extent(buffer& b);
  void drop_kept_extent(buffer& b);
  // Frees one kept extent to make NVMe room; false if there is none.
  bool drop_a_kept_extent();
  // `b` may be written: its shadow and kept extent no longer hold its bytes.
  void mark_written(buffer& b);
  // Spills `b` one tier down with no copy if a copy below holds its bytes:
  // device -> its shadow on the host, or device or host -> its kept
  // extent. False (nothing done) if there is none.
  bool spill_clean(buffer& b);
  // Copies on the spill stream and waits for the copy.
  status copy(void* dst, const void* src, std::size_t bytes, copy_direction direction,
              const event_handle* after);
  void drop(buffer& b);
  // Records that `b` now lives on `to`: the per-tier bytes, `count` (the
  // spill or fill counter) and the bytes moved.
  void moved(buffer& b, tier to, std::uint64_t& count, bool copied = true);
  std::uint64_t& tier_bytes(tier t);

  allocator& alloc_;
  std::unique_ptr<pinned_host_pool> host_;
  std::unique_ptr<nvme_store> nvme_;
  bool verify_nvme_;
  stream_handle spill_stream_{};   // device-to-host copies, waited for
  stream_handle fill_stream_{};    // host-to-device copies, stream-ordered
  event_handle copy_done_{};       // a spill's copy
  std::size_t staging_chunk_ = 0;  // bytes per staging chunk (block multiple)
  // Two pinned staging chunks of the device's own, outside the host tier:
  // a streamed fill or spill that finds the host tier full (of reads in
  // flight, of its arena's fragments) takes these instead. Used under mu_
  // by one streamed transfer at a time.
  void* reserve_[2] = {nullptr, nullptr};
  bool reserve_in_use_ = false;
  std::uint64_t host_capacity_ = 0;   // the host tier's, 0: no limit
  std::uint64_t reading_bytes_ = 0;   // host memory held by prefetch reads in flight
  double last_read_done_at_ = 0;      // the latest read's end on the reader's modeled clock
  std::uint64_t writeback_room_ = 0;  // host room write-behind keeps makeable; 0: off
  std::uint64_t nvme_capacity_ = 0;   // the NVMe tier's, 0: until the disk is full
  // The write-behind's bounce chunk (block-aligned, outside the host tier).
  std::unique_ptr<unsigned char, void (*)(void*)> bounce_{nullptr, std::free};
  std::size_t bounce_bytes_ = 0;
  event_handle staging_done_[2]{};  // the copy of each staging chunk
  stream_handle reader_stream_{};   // the reader's streamed prefetches
  event_handle reader_done_[2]{};   // their chunks' copies
  std::recursive_mutex mu_;
  std::unordered_map<std::uint64_t, buffer> buffers_;
  std::uint64_t next_handle_ = 1;
  std::uint64_t tick_ = 0;
  std::function<std::uint64_t(std::uint64_t)> oracle_;
  std::uint64_t keep_within_ = 0;
  std::vector<const buffer*> passed_over_;      // spill_a_victim's, for one call
  const std::uint64_t* evict_limit_ = nullptr;  // set while a prefetch makes device room
  counters stats_;
  std::unique_ptr<stall_probes> probes_;
  std::uint64_t handler_ = 0;
  std::uint64_t stats_source_ = 0;
  // The reader thread (started with the NVMe tier) and its queue.
  std::deque<read_job> reads_;
  std::condition_variable_any reads_queued_;  // the reader waits for jobs (and write-behinds)
  std::condition_variable_any reads_done_;    // acquires wait for a read
  bool stopping_ = false;
  std::thread reader_;
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
