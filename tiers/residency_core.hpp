// The residency manager's state and work, behind its interface
// (strata/residency.hpp, which has the contract). What each part of it
// does, and where:
//
//   residency_core.cpp    registration, acquire and release, fills, spills
//                         and the device and host memory they take
//   eviction.cpp          which released buffer goes down first
//   clean_copies.cpp      copies kept below unwritten buffers (shadows,
//                         kept extents): spills that move no bytes
//   staged_transfer.cpp   device <-> NVMe through two staging chunks, for
//                         buffers the host tier cannot hold
//   prefetch_fill.cpp     prefetch(): reads on the I/O thread, copies on the
//                         fill stream, and the I/O thread's loop
//   write_behind.cpp      NVMe copies of host buffers made in the background
//   host_access.cpp       acquire_host/release_host: a buffer held on the
//                         host for the host's own work
//
// How it works (managed buffers live on the device when in use and move
// to pinned host memory, then to NVMe, when memory is needed):
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
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "residency_accounts.hpp"
#include "strata/residency.hpp"
#include "victim_order.hpp"
#include "write_behind_budget.hpp"

namespace strata {

class nvme_store;
class pinned_host_pool;

class residency_core {
 public:
  using counters = residency_manager::counters;

  /// See residency_manager::create.
  static result<std::unique_ptr<residency_core>> create(allocator& alloc,
                                                        const tier_options& options,
                                                        io_faults* nvme_faults);
  residency_core(const residency_core&) = delete;
  residency_core& operator=(const residency_core&) = delete;
  residency_core(residency_core&&) = delete;
  residency_core& operator=(residency_core&&) = delete;
  ~residency_core();

  // residency_manager's operations, as it documents them.
  result<std::uint64_t> register_buffer(std::size_t bytes, buffer_kind kind,
                                        residency_policy policy);
  result<void*> acquire(std::uint64_t handle, void* stream, access_mode mode);
  status release(std::uint64_t handle, void* stream);
  result<void*> acquire_host(std::uint64_t handle, access_mode mode);
  status release_host(std::uint64_t handle);
  status unregister(std::uint64_t handle);
  [[nodiscard]] result<tier> where(std::uint64_t handle);
  [[nodiscard]] result<std::size_t> size_of(std::uint64_t handle);
  result<prefetch_outcome> prefetch(std::uint64_t handle, tier to, std::uint64_t next_use,
                                    prefetch_limits limits);
  void wait_for_reads();
  void set_eviction_oracle(std::function<std::uint64_t(std::uint64_t handle)> next_use,
                           std::uint64_t keep_within);
  std::size_t spill(std::size_t bytes);
  [[nodiscard]] counters stats();
  [[nodiscard]] allocator& device_allocator() const noexcept { return alloc_; }
  [[nodiscard]] std::uint64_t host_lookahead() const noexcept { return host_lookahead_; }
  [[nodiscard]] std::uint64_t host_capacity() const noexcept { return host_capacity_; }

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
    unsigned acquired = 0;      // holds of either kind (device acquires and host_held)
    unsigned host_held = 0;     // acquire_host's holds among them (host_access.cpp)
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
    bool by_acquire = false;              // an acquire's own read, not a prefetch's
  };

  // The errors calls on a handle share: none registered, and one that may
  // not be used so now (`why` completes "buffer N ...").
  static status unknown(std::uint64_t handle);
  static status refused(std::uint64_t handle, const std::string& why);

  residency_core(allocator& alloc, std::unique_ptr<pinned_host_pool> host,
                 std::unique_ptr<nvme_store> nvme, bool verify_nvme);
  // A released device (or host) buffer its policy lets move down, or null
  // (victim_order::pick decides which). From the host, with `for_bytes`,
  // one whose pinned memory an allocation of `for_bytes` can take over
  // goes first (no cuMemFreeHost and cuMemHostAlloc for it).
  buffer* victim(tier from, const std::uint64_t* limit = nullptr, std::size_t for_bytes = 0);
  // Spills the next device victim: host_only ones the host tier cannot take
  // now are passed over for the next. Null status with `*spilled` null: no
  // victim is left (the error of a passed-over one, if any, is returned).
  status spill_a_victim(const std::uint64_t* limit, buffer** spilled);
  status spill_to_host(buffer& b);
  // Reads `b` (on NVMe) into `host`, host memory taken for it: checksum
  // checked, the extent kept (the buffer is unwritten), `b` on the host.
  // On failure `host` is freed and `b` stays on NVMe.
  status read_to_host(buffer& b, void* host);
  // Moves `b` (not held) onto the host tier from wherever it is: fresh host
  // memory for a buffer never used, a spill from the device, a read from
  // NVMe. Errors: out_of_memory (no host room), io_error; `b` stays where
  // it was, or one tier down (a spill the host could not hold).
  status bring_to_host(buffer& b);
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
  // Fills `b` (on the host or NVMe) onto the device, into `room` if given
  // (device memory the caller took for it; freed on failure) or into
  // device memory it takes; the copy from the host is queued
  // (order_after_fill makes the acquirer wait for it).
  status fill(buffer& b, void* room = nullptr);
  // An acquire of `b`, on NVMe: starts its read to the host on the reader
  // thread and takes its device memory while the read is in flight, so
  // that a wait for room (the GPU still using released buffers) and the
  // disk overlap. Returns the device memory (null where the read could
  // not start for want of host room, or `b` is not read from a disk: the
  // fill then reads after taking room, as before).
  result<void*> read_while_taking_room(std::uint64_t handle, buffer& b);
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
  // `by_acquire`: the acquire's own read (read_while_taking_room), not
  // counted as a prefetch's.
  result<prefetch_outcome> start_read(std::uint64_t handle, buffer& b, bool to_device,
                                      bool by_acquire = false);
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
  // Gives `handle`'s host copy an NVMe extent in parts through the bounce chunk, the
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
  // Frees one shadow to make host room (with `for_bytes`, one whose pinned
  // memory an allocation of that size can take over first); false if there
  // is none.
  bool drop_a_shadow(std::size_t for_bytes = 0);
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
  // drop(b) once a prefetch read into it has landed (waiting, the lock
  // released), a write-behind of it abandoned; false (nothing dropped) if
  // another thread acquired it meanwhile.
  bool drop_after_read(std::unique_lock<std::recursive_mutex>& lock, buffer& b);
  // An overwrite's acquire of `b`, held nowhere and spilled (host or
  // NVMe): its copies there are freed instead of filled back, and `b` is
  // as if never used. Anything else is left as it is.
  void forget_below(std::unique_lock<std::recursive_mutex>& lock, buffer& b);
  // Records that `b` now lives on `to`: the per-tier bytes, `count` (the
  // spill or fill counter) and the bytes moved.
  void moved(buffer& b, tier to, std::uint64_t& count, bool copied = true);

  allocator& alloc_;
  std::unique_ptr<pinned_host_pool> host_;
  std::unique_ptr<nvme_store> nvme_;
  bool verify_nvme_;
  std::uint64_t host_lookahead_ = 0;  // tier_options::host_lookahead, for a prefetcher
  stream_handle spill_stream_{};      // device-to-host copies, waited for
  stream_handle fill_stream_{};       // host-to-device copies, stream-ordered
  event_handle copy_done_{};          // a spill's copy
  std::size_t staging_chunk_ = 0;     // bytes per staging chunk (block multiple)
  // Two pinned staging chunks of the device's own, outside the host tier:
  // a streamed fill or spill that finds the host tier full (of reads in
  // flight, of its arena's fragments) takes these instead. Used under mu_
  // by one streamed transfer at a time.
  void* reserve_[2] = {nullptr, nullptr};
  bool reserve_in_use_ = false;
  std::uint64_t host_capacity_ = 0;  // the host tier's, 0: no limit
  std::uint64_t reading_bytes_ = 0;  // host memory held by prefetch reads in flight
  double last_read_done_at_ = 0;     // the latest read's end on the reader's modeled clock
  write_behind_budget writes_;       // when write-behind runs, and its bounce chunk
  event_handle staging_done_[2]{};   // the copy of each staging chunk
  stream_handle reader_stream_{};    // the reader's streamed prefetches
  event_handle reader_done_[2]{};    // their chunks' copies
  std::recursive_mutex mu_;
  std::unordered_map<std::uint64_t, buffer> buffers_;
  std::uint64_t next_handle_ = 1;
  victim_order<buffer> order_;
  residency_accounts accounts_;
  std::uint64_t handler_ = 0;
  std::uint64_t stats_source_ = 0;
  // The reader thread (started with the NVMe tier) and its queue.
  std::deque<read_job> reads_;
  std::condition_variable_any reads_queued_;  // the reader waits for jobs (and write-behinds)
  std::condition_variable_any reads_done_;    // acquires wait for a read
  bool stopping_ = false;
  std::thread reader_;
};

}  // namespace strata
