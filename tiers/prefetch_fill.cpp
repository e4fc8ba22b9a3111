// The residency manager's prefetch stages (residency.hpp, "Prefetch"): a
// fetch is NVMe -> pinned host (a read on the reader thread) then host ->
// device (a copy queued on the fill stream), each issued when the one
// before is done; neither is waited for by the thread that called
// prefetch(). (The all-gather of a sharded parameter is the prefetcher's
// own stage, after these: prefetch/shard_gathers.cpp.)
//
// A buffer the host tier cannot hold is streamed instead: its device memory
// and two staging chunks are taken when the prefetch is issued, and the
// reader reads the extent chunk by chunk and copies each to the device on
// its own stream (stream_in), the copy of one chunk overlapping the read of
// the next, then hands the buffer back on the device.
//
// An acquire of a buffer on NVMe queues its own read here too
// (read_while_taking_room, residency_core.cpp), so that its wait for device
// room and the disk overlap; that read is no prefetch (`by_acquire`: not
// counted as one) and ends on the host, the acquire filling it from there.
//
// Invariants: a buffer with `reading` set is on NVMe, owns `host` (the
// read's destination; streamed: the job owns the device memory and the
// chunks), is in the reader's queue or being read, and is neither a victim
// nor dropped (unregister waits for the read); it counts in
// fills_in_flight until finish_read, and its host memory (or its streamed
// job's two chunks) in reading_bytes_, which stays at most the host
// capacity less two staging chunks, the room an acquire's own fill streams
// through. `prefetched` buffers count in
// prefetched_bytes until acquired, spilled (wasted) or their read fails.
//
// Cost: prefetch() takes the mutex and waits for no fill; making room for
// one may spill buffers needed later (spills wait for their copy, as
// always). The reader holds the mutex only to take a job and to hand its
// result back.
#include <algorithm>
#include <chrono>
#include <string>

#include "pinned_host_pool.hpp"
#include "residency_core.hpp"
#include "stall_probes.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

result<prefetch_outcome> residency_core::prefetch(std::uint64_t handle, tier to,
                                                  std::uint64_t next_use, prefetch_limits limits) {
  std::unique_lock lock(mu_);
  auto started = start_prefetch(handle, to, next_use, limits);
  // A modeled NVMe tier's read is waited for here in real time only (this
  // thread's modeled clock stays): what later calls see must not depend on
  // how far the reader thread got, or a run's times would not repeat.
  if (started && *started == prefetch_outcome::started && nvme_ != nullptr && nvme_->modeled()) {
    reads_done_.wait(lock, [&] {  // found anew: another thread may unregister it meanwhile
      const auto it = buffers_.find(handle);
      return it == buffers_.end() || !it->second.reading;
    });
  }
  return started;
}

result<prefetch_outcome> residency_core::start_prefetch(std::uint64_t handle, tier to,
                                                        std::uint64_t next_use,
                                                        prefetch_limits limits) {
  if (to != tier::host && to != tier::device) {
    return status{errc::invalid_argument,
                  "residency manager: prefetch goes to the host or the device tier"};
  }
  retire_finished();
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  buffer& b = it->second;
  if (b.acquired > 0 || b.where == tier::none || b.where == tier::device ||
      (to == tier::host && b.where == tier::host)) {
    return prefetch_outcome::resident;
  }
  const bool to_device = to == tier::device;
  if (to_device && !b.prefetched && accounts_.c.prefetched_bytes + b.bytes > limits.device_bytes) {
    return prefetch_outcome::over_budget;
  }
  if (b.reading) {  // the read is under way: it goes on to the device when in
    if (!to_device || b.prefetched) return prefetch_outcome::resident;
    b.next_use = next_use;
    set_prefetched(b, true);
    return prefetch_outcome::started;
  }
  if (accounts_.c.fills_in_flight + 1 > limits.inflight) return prefetch_outcome::over_budget;
  b.next_use = next_use;
  if (b.where == tier::nvme) {
    auto started = start_read(handle, b, to_device);
    if (started && *started == prefetch_outcome::started && to_device) set_prefetched(b, true);
    return started;
  }
  return start_device_copy(b);
}

result<prefetch_outcome> residency_core::start_read(std::uint64_t handle, buffer& b, bool to_device,
                                                    bool by_acquire) {
  // Host room: host buffers the oracle says are needed later than this one
  // may be spilled on to NVMe (a spill, waited for as every spill is); the
  // read itself is not waited for.
  const std::uint64_t limit = b.next_use;
  if (!reads_leave_room(b.bytes)) {
    if (to_device) return start_streamed_read(handle, b);
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  auto host = host_->allocate(b.bytes);
  while (!host && host.code() == errc::out_of_memory) {
    if (accounts_.c.staging_bytes > 0) retire_finished();
    if (drop_a_shadow(b.bytes)) {
      host = host_->allocate(b.bytes);
      continue;
    }
    buffer* v = victim(tier::host, &limit, b.bytes);
    if (v == nullptr) break;
    if (auto s = spill_to_nvme(*v); !s) return s;
    host = host_->allocate(b.bytes);
  }
  if (!host) {
    if (host.code() != errc::out_of_memory) return host.error();
    if (to_device) return start_streamed_read(handle, b);
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  b.host = *host;
  b.reading = true;
  reading_bytes_ += b.bytes;
  ++accounts_.c.fills_in_flight;
  if (!by_acquire) ++accounts_.c.prefetch_reads;
  reads_.push_back(
      {handle, b.extent, *host, b.bytes, nullptr, {nullptr, nullptr}, modeled_now(), by_acquire});
  reads_queued_.notify_one();
  return prefetch_outcome::started;
}

result<prefetch_outcome> residency_core::start_streamed_read(std::uint64_t handle, buffer& b) {
  // A modeled tier's streamed read would end on the reader thread's clock,
  // which the acquiring stream cannot wait for: the acquire streams it.
  if (nvme_->modeled()) {
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  const std::uint64_t limit = b.next_use;
  const std::uint64_t chunk = std::min<std::uint64_t>(staging_chunk_, b.bytes);
  if (!reads_leave_room(2 * chunk)) {
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  read_job job{handle, b.extent, nullptr, b.bytes, nullptr, {nullptr, nullptr}, modeled_now()};
  for (void*& slot : job.slots) {
    auto p = host_->allocate(std::min(staging_chunk_, b.bytes));
    if (!p && p.code() == errc::out_of_memory && drop_a_shadow()) {
      p = host_->allocate(std::min(staging_chunk_, b.bytes));
    }
    if (!p) {
      free_streamed(job);
      if (p.code() != errc::out_of_memory) return p.error();
      ++accounts_.c.prefetch_no_room;
      return prefetch_outcome::no_room;
    }
    slot = *p;
  }
  ++b.acquired;  // making room must not pick this buffer
  auto dev = device_memory(b.bytes, &limit);
  --b.acquired;
  if (!dev) {
    free_streamed(job);
    if (dev.code() != errc::out_of_memory) return dev.error();
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  job.dev = *dev;
  b.reading = true;
  reading_bytes_ += 2 * chunk;
  ++accounts_.c.fills_in_flight;
  ++accounts_.c.prefetch_reads;
  reads_.push_back(job);
  reads_queued_.notify_one();
  return prefetch_outcome::started;
}

bool residency_core::reads_leave_room(std::uint64_t more) const {
  return host_capacity_ == 0 || reading_bytes_ + more + 2 * staging_chunk_ <= host_capacity_;
}

void residency_core::free_streamed(const read_job& job) {
  for (void* slot : job.slots) {
    if (slot != nullptr) host_->free(slot);
  }
  if (job.dev != nullptr) (void)alloc_.try_free(job.dev);
}

result<prefetch_outcome> residency_core::start_device_copy(buffer& b) {
  const std::uint64_t limit = b.next_use;
  ++b.acquired;  // making room must not spill this buffer on to NVMe
  auto dev = device_memory(b.bytes, &limit);
  --b.acquired;
  if (!dev) {
    if (dev.code() != errc::out_of_memory) return dev.error();
    ++accounts_.c.prefetch_no_room;
    return prefetch_outcome::no_room;
  }
  if (auto s = queue_fill_copy(b, *dev); !s) {
    (void)alloc_.try_free(*dev);
    return s;
  }
  set_prefetched(b, true);
  ++accounts_.c.prefetch_copies;
  return prefetch_outcome::started;
}

void residency_core::reader_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    std::uint64_t write = 0;
    reads_queued_.wait(
        lock, [&] { return stopping_ || !reads_.empty() || (write = writeback_candidate()) != 0; });
    if (stopping_) {
      // The manager is going: the queued reads never run; their buffers
      // stay on NVMe and drop() frees the host memory they hold.
      for (const read_job& job : reads_) {
        if (auto it = buffers_.find(job.handle); it != buffers_.end()) it->second.reading = false;
        free_streamed(job);
      }
      reads_.clear();
      reads_done_.notify_all();
      return;
    }
    if (reads_.empty()) {
      write_behind(lock, write);
      continue;
    }
    const read_job job = reads_.front();
    reads_.pop_front();
    lock.unlock();
    // Modeled time: the read starts no earlier than it was asked for.
    modeled_wait_until(job.posted_at);
    // Checksum checked; a streamed read also waits for its copies.
    status read = job.dev != nullptr ? stream_in(job.extent, job.dev, job.bytes, job.slots,
                                                 reader_stream_, reader_done_)
                                     : nvme_->read(job.extent, job.host, job.bytes);
    lock.lock();
    finish_read(job, read);
  }
}

void residency_core::finish_read(const read_job& job, status read) {
  buffer& b = buffers_.at(job.handle);  // unregister waits for the read
  b.reading = false;
  b.read_done_at = modeled_now();
  last_read_done_at_ = std::max(last_read_done_at_, b.read_done_at);
  reading_bytes_ -=
      job.dev != nullptr ? 2 * std::min<std::uint64_t>(staging_chunk_, job.bytes) : job.bytes;
  --accounts_.c.fills_in_flight;
  if (job.dev != nullptr) {
    for (void* slot : job.slots) host_->free(slot);
  }
  if (!read) {  // the extent stays: the buffer is still on NVMe, whole
    if (job.dev != nullptr) (void)alloc_.try_free(job.dev);
    if (b.host != nullptr) host_->free(b.host);
    b.host = nullptr;
    b.read_failure = std::move(read);
    if (!job.by_acquire) ++accounts_.c.prefetch_failed;
    set_prefetched(b, false);
  } else if (job.dev != nullptr) {  // streamed: on the device, its copies done
    keep_extent(b);
    b.device = job.dev;
    moved(b, tier::device, accounts_.c.fills_from_nvme);
  } else {
    keep_extent(b);
    moved(b, tier::host, accounts_.c.fills_from_nvme);
    // The next stage, unless an acquire is already waiting to fill it.
    if (b.prefetched && b.acquired == 0) {
      auto copied = start_device_copy(b);
      if (!copied || *copied != prefetch_outcome::started) set_prefetched(b, false);
    }
  }
  reads_done_.notify_all();
}

void residency_core::wait_for_reads() {
  std::unique_lock lock(mu_);
  // reading_bytes_ counts queued reads and the one being read.
  reads_done_.wait(lock, [&] { return stopping_ || reading_bytes_ == 0; });
  modeled_wait_until(last_read_done_at_);
}

double residency_core::modeled_now() const {
  if (!alloc_.dev().timing_only()) return 0;
  auto now = alloc_.dev().modeled_clock();
  return now ? *now : 0;
}

void residency_core::modeled_wait_until(double t) const {
  if (alloc_.dev().timing_only()) (void)alloc_.dev().advance_modeled_clock(t);
}

void residency_core::wait_for_read(std::unique_lock<std::recursive_mutex>& lock, buffer& b) {
  const auto t0 = std::chrono::steady_clock::now();
  reads_done_.wait(lock, [&] { return !b.reading; });
  // Modeled time: this thread waited for the read to end.
  modeled_wait_until(b.read_done_at);
  const std::uint64_t waited = elapsed_ns(t0);
  accounts_.c.stall_ns += waited;
  accounts_.c.fill_wait_ns += waited;
}

}  // namespace strata
