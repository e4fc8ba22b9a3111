#include "residency_core.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "pinned_host_pool.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

namespace {

// `stream` as the device knows it. Errors: invalid_argument for a stream
// the device did not make (sim; a GPU driver accepts any handle).
result<stream_handle> check_stream(device& d, void* stream, const char* call) {
  auto s = d.wrap_stream(stream);
  if (!s) {
    return status{errc::invalid_argument,
                  std::string("residency manager: ") + call + ": " + s.error().message()};
  }
  return *s;
}

// Makes `e` on `d` unless `made` says it was made already (a buffer's
// events are made at their first use and kept).
status event_once(device& d, event_handle& e, bool& made) {
  if (made) return {};
  auto event = d.create_event();
  if (!event) return event.error();
  e = *event;
  made = true;
  return {};
}

}  // namespace

status residency_core::unknown(std::uint64_t handle) {
  return {errc::invalid_argument,
          "residency manager: no buffer with handle " + std::to_string(handle)};
}

status residency_core::refused(std::uint64_t handle, const std::string& why) {
  return {errc::invalid_argument,
          "residency manager: buffer " + std::to_string(handle) + " " + why};
}

result<std::unique_ptr<residency_core>> residency_core::create(allocator& alloc,
                                                               const tier_options& options,
                                                               io_faults* nvme_faults) {
  if (auto s = check_tier_options(options); !s) return s;
  auto host = pinned_host_pool::create(alloc.dev(), options);
  if (!host) return host.error();
  std::unique_ptr<nvme_store> nvme;
  if (options.nvme_model) {
    if (!alloc.dev().timing_only()) {
      return status{errc::invalid_argument,
                    "residency manager: nvme_model needs a timing-only device "
                    "(sim:...,data=none); " +
                        alloc.dev().name() + " moves bytes"};
    }
    if (options.nvme_write_behind) {
      return status{errc::invalid_argument,
                    "residency manager: nvme_model needs nvme_write_behind:false (the "
                    "write-behind's time is not modeled)"};
    }
    nvme = nvme_store::open_modeled(options, alloc.dev());
  } else if (!options.nvme_dir.empty()) {
    auto store = nvme_store::open(options, nvme_faults);
    if (!store) return store.error();
    nvme = std::move(*store);
  }
  std::unique_ptr<residency_core> m(
      new residency_core(alloc, std::move(*host), std::move(nvme), options.nvme_verify));
  m->host_lookahead_ = options.host_lookahead;
  // Two copy streams: a spill's device-to-host copy need not queue behind
  // fills in flight (the two directions overlap on the bus); a third for
  // the reader's streamed prefetches, which it waits for off the mutex.
  for (stream_handle* s : {&m->spill_stream_, &m->fill_stream_, &m->reader_stream_}) {
    auto stream = alloc.dev().create_stream();
    if (!stream) return stream.error();
    *s = *stream;
  }
  for (event_handle* e : {&m->copy_done_, &m->staging_done_[0], &m->staging_done_[1],
                          &m->reader_done_[0], &m->reader_done_[1]}) {
    auto event = alloc.dev().create_event();
    if (!event) return event.error();
    *e = *event;
  }
  if (m->nvme_ != nullptr) {
    // Two chunks of at most 4 MiB, together at most half the host tier,
    // whole logical blocks of the NVMe file.
    const std::size_t block = m->nvme_->logical_block();
    const std::size_t chunk =
        std::min<std::size_t>(std::size_t{4} << 20, options.host_capacity / 4);
    m->staging_chunk_ = std::max(block, chunk / block * block);
    for (void*& r : m->reserve_) {
      auto p = alloc.dev().host_alloc(m->staging_chunk_);
      if (!p) return p.error();
      r = *p;
    }
    m->host_capacity_ = options.host_capacity;
    // Write-behind keeps the room the read-ahead needs makeable without a
    // write (at most the whole host tier).
    auto writes = write_behind_budget::create(options, block, chunk);
    if (!writes) return writes.error();
    m->writes_ = std::move(*writes);
  }
  m->handler_ =
      alloc.add_pressure_handler([raw = m.get()](std::size_t bytes) { return raw->spill(bytes); });
  m->stats_source_ =
      alloc.add_stats_source("offload", [raw = m.get()] { return raw->stats().to_map(); });
  if (m->nvme_ != nullptr) m->reader_ = std::thread([raw = m.get()] { raw->reader_loop(); });
  return m;
}

residency_core::residency_core(allocator& alloc, std::unique_ptr<pinned_host_pool> host,
                               std::unique_ptr<nvme_store> nvme, bool verify_nvme)
    : alloc_(alloc), host_(std::move(host)), nvme_(std::move(nvme)), verify_nvme_(verify_nvme) {}

residency_core::~residency_core() {
  try {
    if (handler_ != 0) alloc_.remove_pressure_handler(handler_);
    if (stats_source_ != 0) alloc_.remove_stats_source(stats_source_);
  } catch (const error&) {  // registered by create(): cannot be unknown
  }
  if (reader_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    reads_queued_.notify_all();
    reader_.join();  // it finishes the read under way and drops the queue
  }
  std::lock_guard lock(mu_);
  for (auto& [handle, b] : buffers_) drop(b);
  device& d = alloc_.dev();
  accounts_.probes().drain(d);
  for (const event_handle e :
       {copy_done_, staging_done_[0], staging_done_[1], reader_done_[0], reader_done_[1]}) {
    if (e.native != nullptr) (void)d.destroy_event(e);
  }
  for (const stream_handle s : {spill_stream_, fill_stream_, reader_stream_}) {
    if (s.native == nullptr) continue;
    (void)d.synchronize_stream(s);
    (void)d.destroy_stream(s);
  }
  for (void* r : reserve_) {
    if (r != nullptr) (void)d.host_free(r);
  }
}

void residency_core::moved(buffer& b, tier to, std::uint64_t& count, bool copied) {
  ++count;
  // Write-behind (write_behind.cpp): a buffer leaving the host is not the
  // bytes a write-behind under way copies; one arriving may need one.
  if (b.where == tier::host) b.write_stale = true;
  if (to == tier::host) {
    b.no_writeback = false;
    reads_queued_.notify_one();
  }
  accounts_.moved(b.where, to, b.bytes, copied);
  b.where = to;
}

bool residency_core::retire(buffer& b, bool wait) {
  if (b.staging == nullptr) return true;
  device& d = alloc_.dev();
  if (wait) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)d.synchronize_event(b.filled);  // a failure here still ends the copy
    accounts_.c.fill_wait_ns += elapsed_ns(t0);
  } else if (auto done = d.query_event(b.filled); done.ok() && !done.yes()) {
    return false;
  }
  if (b.dirty) {
    host_->free(b.staging);
  } else {  // unwritten since the fill: the host copy stays valid
    b.shadow = b.staging;
    accounts_.c.shadow_bytes += b.bytes;
  }
  b.staging = nullptr;
  accounts_.c.staging_bytes -= b.bytes;
  --accounts_.c.fills_in_flight;
  return true;
}

void residency_core::retire_finished() {
  if (accounts_.c.staging_bytes == 0) return;
  for (auto& [handle, b] : buffers_) (void)retire(b, false);
}

void residency_core::set_prefetched(buffer& b, bool on) {
  if (b.prefetched == on) return;
  b.prefetched = on;
  if (on) {
    b.released_at = order_.stamp();  // brought in for use: not least recently used
    accounts_.c.prefetched_bytes += b.bytes;
  } else {
    accounts_.c.prefetched_bytes -= b.bytes;
  }
}

void residency_core::drop(buffer& b) {
  (void)retire(b, true);
  mark_written(b);  // frees the shadow and the kept extent
  set_prefetched(b, false);
  if (b.device != nullptr) (void)alloc_.try_free(b.device);
  if (b.host != nullptr) host_->free(b.host);
  if (b.where == tier::nvme) (void)nvme_->erase(b.extent);
  if (b.has_release_event) (void)alloc_.dev().destroy_event(b.released);
  if (b.has_fill_event) (void)alloc_.dev().destroy_event(b.filled);
  b.has_fill_event = false;
  if (b.where != tier::none) accounts_.tier_bytes(b.where) -= b.bytes;
  b.device = nullptr;
  b.host = nullptr;
  b.where = tier::none;
  b.has_release_event = false;
}

bool residency_core::drop_after_read(std::unique_lock<std::recursive_mutex>& lock, buffer& b) {
  // A prefetch read into its host memory finishes first (the reader hands
  // it back to this buffer); a write-behind of it is abandoned at its next
  // part (write_behind.cpp).
  if (b.reading) reads_done_.wait(lock, [&] { return !b.reading; });
  if (b.acquired > 0) return false;  // acquired while the lock was released
  b.write_stale = true;
  drop(b);
  return true;
}

void residency_core::forget_below(std::unique_lock<std::recursive_mutex>& lock, buffer& b) {
  if (b.acquired == 0 && (b.where == tier::host || b.where == tier::nvme)) {
    (void)drop_after_read(lock, b);
  }
}

result<std::uint64_t> residency_core::register_buffer(std::size_t bytes, buffer_kind kind,
                                                      residency_policy policy) {
  if (bytes == 0) return status{errc::invalid_argument, "residency manager: a buffer of 0 bytes"};
  if (policy == residency_policy::nvme_home && nvme_ == nullptr) {
    return status{errc::invalid_argument,
                  "residency manager: an nvme_home buffer needs an NVMe tier (nvme_dir)"};
  }
  // A buffer is whole on the device when acquired: one larger than the
  // device can never be.
  auto info = alloc_.dev().get_memory_info();
  if (!info) return info.error();
  if (bytes > info->total) {
    return status{errc::invalid_argument, "residency manager: a buffer of " +
                                              std::to_string(bytes) +
                                              " bytes is larger than the device (" +
                                              std::to_string(info->total) + " bytes)"};
  }
  std::lock_guard lock(mu_);
  const std::uint64_t h = next_handle_++;
  buffers_.emplace(h, buffer{bytes, kind, policy});
  return h;
}

status residency_core::copy(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                            const event_handle* after) {
  device& d = alloc_.dev();
  if (after != nullptr) {
    if (auto s = d.stream_wait_event(spill_stream_, *after); !s) return s;
  }
  if (auto s = d.copy_async(dst, src, bytes, direction, spill_stream_); !s) return s;
  if (auto s = d.record_event(copy_done_, spill_stream_); !s) return s;
  return d.synchronize_event(copy_done_);
}

status residency_core::queue_fill_copy(buffer& b, void* dev) {
  device& d = alloc_.dev();
  if (auto made = event_once(d, b.filled, b.has_fill_event); !made) return made;
  status queued = d.copy_async(dev, b.host, b.bytes, copy_direction::host_to_device, fill_stream_);
  if (queued) queued = d.record_event(b.filled, fill_stream_);
  if (!queued) {
    (void)d.synchronize_stream(fill_stream_);  // nothing may still read b.host
    return queued;                             // the caller frees `dev`
  }
  b.dirty = false;     // the device copy is the host copy until written
  b.staging = b.host;  // given back (or kept as the shadow) once the copy is done
  b.host = nullptr;
  b.device = dev;
  accounts_.c.staging_bytes += b.bytes;
  ++accounts_.c.fills_in_flight;
  moved(b, tier::device, accounts_.c.fills_from_host);
  return {};
}

status residency_core::fill(buffer& b, void* room) {
  const auto t0 = std::chrono::steady_clock::now();
  // Device memory first: making room may spill buffers to the host, and the
  // staging of an NVMe fill may then push those on to NVMe. The other way
  // round, the staging would hold the host memory the device spills need.
  auto dev = room != nullptr ? result<void*>(room) : device_memory(b.bytes);
  if (!dev) return dev.error();
  status st;
  if (b.where == tier::nvme) {
    auto host = host_memory(b.bytes);
    if (!host && host.code() == errc::out_of_memory) {
      st = stream_from_nvme(b, *dev);  // the host tier cannot hold it: straight to the device
    } else {
      st = host ? read_to_host(b, *host) : host.error();
    }
  }
  if (st && b.where == tier::host) st = queue_fill_copy(b, *dev);
  if (!st) (void)alloc_.try_free(*dev);  // the buffer stays where it was
  accounts_.c.fill_wait_ns += elapsed_ns(t0);
  return st;
}

status residency_core::read_to_host(buffer& b, void* host) {
  if (auto read = nvme_->read(b.extent, host, b.bytes); !read) {  // checksum checked
    host_->free(host);
    return read;
  }
  keep_extent(b);
  b.host = host;
  moved(b, tier::host, accounts_.c.fills_from_nvme);
  return {};
}

status residency_core::order_after_fill(buffer& b, stream_handle stream, bool late) {
  device& d = alloc_.dev();
  bool in_flight = false;
  if (b.staging != nullptr) {
    auto done = d.query_event(b.filled);
    in_flight = !done.ok() || !done.yes();
  }
  const bool prefetched = b.prefetched;
  set_prefetched(b, false);
  if (late) ++accounts_.c.late_fills;  // filled (or read) by this acquire
  if (!in_flight) {
    if (prefetched && !late) ++accounts_.c.prefetch_hits;
    return {};
  }
  // A prefetch still in flight is a hit if it is done when the stream gets
  // to it (the thread may run ahead of the stream): the probe decides.
  bool decided = false;
  status st = accounts_.probes().wait(d, stream, b.filled, prefetched && !late, decided);
  if (prefetched && !late && !decided) ++accounts_.c.late_fills;
  return st;
}

result<void*> residency_core::read_while_taking_room(std::uint64_t handle, buffer& b) {
  // A read to the host (a prefetch's or this acquire's own; a streamed
  // read brings its own device memory) ends with the buffer on the host:
  // with an acquire waiting, the reader queues no copy.
  const bool unread = b.where == tier::nvme && !b.reading;
  const bool to_host = b.reading && b.host != nullptr;
  if ((!unread && !to_host) || nvme_ == nullptr || nvme_->modeled()) return nullptr;
  if (unread) {
    const std::uint64_t next_use = b.next_use;
    b.next_use = 0;  // needed now: any host buffer may make room for it
    auto started = start_read(handle, b, false, true);
    if (!started || *started != prefetch_outcome::started) b.next_use = next_use;
    if (!started) return started.error();
    if (*started != prefetch_outcome::started) return nullptr;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto dev = device_memory(b.bytes);
  accounts_.c.fill_wait_ns += elapsed_ns(t0);
  // Without room the acquire fails as it always did; the read goes on and
  // the buffer lands on the host, whole.
  if (!dev) return dev.error();
  return *dev;
}

result<void*> residency_core::acquire(std::uint64_t handle, void* stream, access_mode mode) {
  auto consumer = check_stream(alloc_.dev(), stream, "acquire");
  if (!consumer) return consumer.error();
  std::unique_lock lock(mu_);
  retire_finished();
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  buffer& b = it->second;
  if (b.host_held > 0) return refused(handle, "is acquired on the host (acquire_host)");
  if (mode == access_mode::overwrite) forget_below(lock, b);
  ++b.acquired;  // not a victim while it comes in
  auto room = read_while_taking_room(handle, b);
  if (!room) {
    --b.acquired;
    return room.error();
  }
  bool late = false;
  if (b.reading) {
    wait_for_read(lock, b);
    late = true;
  }
  if (!b.read_failure.ok()) {  // a read failed: the buffer is still on NVMe
    if (*room != nullptr) (void)alloc_.try_free(*room);
    status failed = b.read_failure;
    b.read_failure = {};
    --b.acquired;
    return failed;
  }
  if (b.where == tier::none) {
    auto dev = device_memory(b.bytes);
    if (!dev) {
      --b.acquired;
      return dev.error();
    }
    b.device = *dev;
    b.where = tier::device;
    accounts_.c.device_bytes += b.bytes;
  } else if (b.where != tier::device) {
    if (auto s = fill(b, *room); !s) {
      --b.acquired;
      return s;
    }
    late = true;
  } else if (*room != nullptr) {
    (void)alloc_.try_free(*room);
  }
  if (auto s = order_after_fill(b, *consumer, late); !s) {
    --b.acquired;
    return s;
  }
  // Work another stream queued before the last release (a write this
  // stream must read after, or a read a write here must not overtake)
  // comes first. Same stream: one compare.
  if (b.has_release_event && b.released_on != *consumer) {
    if (auto s = alloc_.dev().stream_wait_event(*consumer, b.released); !s) {
      --b.acquired;
      return s;
    }
  }
  if (mode != access_mode::read_only) mark_written(b);
  return b.device;
}

status residency_core::release(std::uint64_t handle, void* stream) {
  if (auto s = check_stream(alloc_.dev(), stream, "release"); !s) return s.error();
  std::lock_guard lock(mu_);
  retire_finished();
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  buffer& b = it->second;
  if (b.acquired == b.host_held) {
    return refused(handle, b.host_held > 0 ? "is acquired on the host: release_host ends that"
                                           : "is not acquired");
  }
  device& d = alloc_.dev();
  if (auto made = event_once(d, b.released, b.has_release_event); !made) return made;
  if (auto s = d.record_event(b.released, stream_handle{stream}); !s) return s;
  b.released_on = stream_handle{stream};
  --b.acquired;
  b.released_at = order_.stamp();
  if (b.acquired == 0 && b.policy == residency_policy::nvme_home) return send_home(b);
  return {};
}

status residency_core::unregister(std::uint64_t handle) {
  std::unique_lock lock(mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  if (it->second.acquired > 0 || !drop_after_read(lock, it->second)) {
    return refused(handle, "is still acquired");
  }
  // By key: a registration while the lock was released for the read may
  // have rehashed the map (references stay valid, iterators do not).
  buffers_.erase(handle);
  return {};
}

result<tier> residency_core::where(std::uint64_t handle) {
  std::lock_guard lock(mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  return it->second.where;
}

result<std::size_t> residency_core::size_of(std::uint64_t handle) {
  std::lock_guard lock(mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return unknown(handle);
  return it->second.bytes;
}

void residency_core::set_eviction_oracle(
    std::function<std::uint64_t(std::uint64_t handle)> next_use, std::uint64_t keep_within) {
  std::lock_guard lock(mu_);
  order_.set_oracle(std::move(next_use), keep_within);
}

residency_core::counters residency_core::stats() {
  std::lock_guard lock(mu_);
  return accounts_.snapshot();
}

}  // namespace strata
