#include "strata/prefetcher.hpp"

#include <cstdio>
#include <string>
#include <unordered_set>
#include <utility>

#include "access_order.hpp"
#include "shard_gathers.hpp"
#include "strata/strata.hpp"

namespace strata {

result<std::unique_ptr<prefetcher>> prefetcher::create(residency_manager& buffers,
                                                       const prefetch_options& options) {
  if (auto s = check_prefetch_options(options); !s) return s;
  std::unique_ptr<prefetcher> p(new prefetcher(buffers, options));
  p->stats_source_ = buffers.device_allocator().add_stats_source(
      "prefetch", [raw = p.get()] { return raw->stats().to_map(); });
  return p;
}

prefetcher::prefetcher(residency_manager& buffers, const prefetch_options& options)
    : buffers_(buffers),
      prefetch_bytes_(options.prefetch_bytes),
      inflight_(options.prefetch_inflight),
      host_lookahead_(buffers.host_lookahead()),
      host_hold_lookahead_(buffers.host_capacity() > 0
                               ? std::min(host_lookahead_, buffers.host_capacity() / 8)
                               : host_lookahead_),
      device_lookahead_(options.device_lookahead),
      reuse_distance_(options.reuse_distance),
      shards_(std::make_unique<shard_gathers>(buffers, buffers.device_allocator())) {}

prefetcher::~prefetcher() {
  shards_.reset();  // waits for its gathers, frees the full buffers
  buffers_.set_eviction_oracle(nullptr);
  try {
    buffers_.device_allocator().remove_stats_source(stats_source_);
  } catch (const error&) {  // added by create(): cannot be unknown
  }
}

status prefetcher::begin_step() {
  const residency_manager::counters now = buffers_.stats();
  bool follow = false;
  {
    std::lock_guard lock(order_mu_);
    if (in_step_) {
      return {errc::invalid_argument, "prefetcher: begin_step before the last step ended"};
    }
    in_step_ = true;
    logged_this_step_ = false;
    step_start_ = now;
    follow = order_ != nullptr;  // the first step records instead
    if (follow) order_->rewind();
  }
  if (follow) {
    std::lock_guard walk(walk_mu_);
    schedule();
  }
  return {};
}

status prefetcher::end_step() {
  const residency_manager::counters now = buffers_.stats();
  bool installed = false;
  bool follow = false;
  {
    std::lock_guard lock(order_mu_);
    if (!in_step_) return {errc::invalid_argument, "prefetcher: end_step without begin_step"};
    in_step_ = false;
    ++stats_.steps;
    stats_.step_bytes_to_host = now.bytes_to_host - step_start_.bytes_to_host;
    stats_.step_bytes_to_nvme = now.bytes_to_nvme - step_start_.bytes_to_nvme;
    stats_.step_bytes_from_nvme = now.bytes_from_nvme - step_start_.bytes_from_nvme;
    stats_.step_bytes_from_host = now.bytes_from_host - step_start_.bytes_from_host;
    if (!order_ && !recording_.empty()) {
      stats_.recorded = recording_.size();
      order_ = std::make_unique<access_order>(std::move(recording_));
      recording_ = {};
      installed = true;
    }
    // The next step starts at the order's start: its first fills are
    // issued now, while the caller waits for this step's last kernels.
    // Its gathers wait for begin_step: the shards may be updated in
    // between (the optimizer step), so a full buffer gathered now, or kept
    // from this step, could be stale.
    follow = order_ != nullptr;
    if (follow) order_->rewind();
  }
  status resharded;  // reported last: the step still ends, the order is still installed
  {
    std::lock_guard walk(walk_mu_);
    resharded = shards_->reshard_held();
  }
  if (installed) {
    // From now on the order decides what is spilled: the furthest next use
    // first. Set with no lock of ours held (the manager takes its own).
    buffers_.set_eviction_oracle(
        [this](std::uint64_t handle) {
          std::lock_guard lock(order_mu_);
          return order_->next_use(handle);
        },
        reuse_distance_);
  }
  if (follow) {
    std::lock_guard walk(walk_mu_);
    schedule(false);
  }
  return resharded;
}

status prefetcher::add_sharded(std::uint64_t handle, communicator& comm, stream_handle comm_stream,
                               dtype type) {
  if (&comm.dev() != &buffers_.device_allocator().dev()) {
    return {errc::invalid_argument, "prefetcher: sharded parameter " + std::to_string(handle) +
                                        ": its communicator is on another device"};
  }
  if (auto known = comm.dev().wrap_stream(comm_stream.native); !known) {
    return {errc::invalid_argument,
            "prefetcher: sharded parameter " + std::to_string(handle) +
                ": comm_stream is not a stream of its device: " + known.error().message()};
  }
  std::lock_guard walk(walk_mu_);
  return shards_->add(handle, comm, comm_stream, type);
}

result<void*> prefetcher::acquire(std::uint64_t handle, void* stream, access_mode mode) {
  std::size_t full = 0;
  {
    std::lock_guard walk(walk_mu_);
    full = shards_->full_bytes(handle);
  }
  if (full > 0 && mode != access_mode::read_only) {
    return status{errc::invalid_argument,
                  "prefetcher: sharded parameter " + std::to_string(handle) +
                      " is acquired read_only (its full buffer is a gathered copy); update the "
                      "shard through the residency manager"};
  }
  // The size first: once acquired, nothing below fails. A sharded
  // parameter's shard must still be registered: its full buffer, gathered
  // ahead, would otherwise be handed out stale.
  auto bytes = buffers_.size_of(handle);  // no lock held
  if (!bytes && full > 0) {
    std::lock_guard walk(walk_mu_);
    (void)shards_->forget(handle);
  }
  if (!bytes) return bytes.error();
  if (full > 0) bytes = full;
  result<void*> p = nullptr;
  if (full > 0) {
    std::lock_guard walk(walk_mu_);
    p = shards_->acquire(handle, stream_handle{stream});
  } else {
    p = buffers_.acquire(handle, stream, mode);
  }
  if (!p) return p;
  note(handle, stream, *bytes, false);
  return p;
}

result<void*> prefetcher::acquire_host(std::uint64_t handle, access_mode mode) {
  auto bytes = buffers_.size_of(handle);
  if (!bytes) return bytes.error();
  auto p = buffers_.acquire_host(handle, mode);
  if (!p) return p;
  note(handle, nullptr, *bytes, true);
  return p;
}

status prefetcher::release_host(std::uint64_t handle) {
  return buffers_.release_host(handle);
}

void prefetcher::note(std::uint64_t handle, void* stream, std::uint64_t bytes, bool on_host) {
  std::string divergence;
  bool follow = false;
  {
    std::lock_guard lock(order_mu_);
    if (in_step_ && !order_) {
      recording_.push_back({handle, stream, bytes, on_host});
    } else if (in_step_) {
      follow = true;
      const access_order::followed f = order_->follow(handle);
      if (f.how == access_order::match::in_order) {
        ++stats_.in_order;
      } else {
        const bool resynced = f.how == access_order::match::resynced;
        ++(resynced ? stats_.resyncs : stats_.unrecorded);
        if (!logged_this_step_) {
          logged_this_step_ = true;
          divergence = "strata: prefetch: step " + std::to_string(stats_.steps + 1) +
                       ": acquire of buffer " + std::to_string(handle) +
                       " where the order has buffer " + std::to_string(f.expected_handle) +
                       " (position " + std::to_string(f.expected_at) + "); " +
                       (resynced ? "re-synchronized at position " + std::to_string(f.resumed_at)
                                 : std::string("not in the order, cursor kept"));
        }
      }
    }
  }
  if (!divergence.empty()) std::fprintf(stderr, "%s\n", divergence.c_str());
  if (follow) {
    std::lock_guard walk(walk_mu_);
    schedule();
  }
}

status prefetcher::release(std::uint64_t handle, void* stream) {
  {
    std::lock_guard walk(walk_mu_);
    if (shards_->contains(handle)) {
      bool keep = false;  // a full buffer the order needs again soon
      {
        std::lock_guard lock(order_mu_);  // after walk_mu_, as a walk takes them
        keep = order_ != nullptr && order_->next_use(handle) <= reuse_distance_;
      }
      return shards_->release(handle, stream_handle{stream}, keep);
    }
  }
  return buffers_.release(handle, stream);
}

status prefetcher::prefetch(std::uint64_t handle) {
  std::lock_guard walk(walk_mu_);
  auto done = buffers_.prefetch(handle, tier::device, 0, {prefetch_bytes_, inflight_});
  std::lock_guard lock(order_mu_);
  ++stats_.hints;
  if (!done) return done.error();
  if (*done == prefetch_outcome::started) {
    ++stats_.issued_device;
  } else {
    ++stats_.hints_not_issued;
    if (*done == prefetch_outcome::no_room) ++stats_.no_room;
  }
  return {};
}

void prefetcher::schedule(bool gather) {
  if (prefetch_bytes_ == 0) return;  // prefetch off
  // The accesses ahead that start within the lookahead, copied out so that
  // the manager is called without the order's lock.
  std::vector<ahead> window;
  {
    std::lock_guard lock(order_mu_);
    const std::uint64_t reach = std::max(host_lookahead_, device_lookahead_);
    std::uint64_t distance = 0;
    std::unordered_set<std::uint64_t> seen;
    for (std::size_t i = 0; i < order_->size() && distance < reach; ++i) {
      const access& a = order_->ahead(i);
      // A host hold further ahead than an eighth of a capped host tier
      // waits: holds run back to back (an optimizer step on host threads),
      // so a read a few buffers ahead hides the disk; one further ahead is
      // the first thing later spills push out (it is needed last), and is
      // read again.
      if ((!a.on_host || distance < host_hold_lookahead_) && seen.insert(a.handle).second) {
        window.push_back({a.handle, distance, a.on_host});
      }
      distance += a.bytes;
    }
  }
  bool to_device = true;
  std::uint64_t issued_device = 0;
  std::uint64_t issued_host = 0;
  std::uint64_t no_room = 0;
  bool stopped = false;
  for (const ahead& a : window) {
    prefetch_outcome done = prefetch_outcome::resident;
    bool asked_device = false;
    if (to_device && !a.on_host && a.distance < device_lookahead_) {
      auto r = buffers_.prefetch(a.handle, tier::device, a.distance, {prefetch_bytes_, inflight_});
      if (!r) continue;  // unregistered since it was recorded
      done = *r;
      asked_device = true;
      if (done == prefetch_outcome::over_budget || done == prefetch_outcome::no_room) {
        to_device = false;  // in order: nothing further goes to the device in this walk
        no_room += done == prefetch_outcome::no_room ? 1 : 0;
        stopped = stopped || done == prefetch_outcome::over_budget;
      }
    }
    const bool device_done =
        asked_device && (done == prefetch_outcome::started || done == prefetch_outcome::resident);
    if (device_done) {
      issued_device += done == prefetch_outcome::started ? 1 : 0;
      continue;
    }
    if (a.distance >= host_lookahead_) continue;
    auto r = buffers_.prefetch(a.handle, tier::host, a.distance, {prefetch_bytes_, inflight_});
    if (!r) continue;
    if (*r == prefetch_outcome::started) ++issued_host;
    if (*r == prefetch_outcome::no_room) ++no_room;
    if (*r == prefetch_outcome::over_budget) {  // prefetch_inflight: nothing more this walk
      stopped = true;
      break;
    }
  }
  {
    std::lock_guard lock(order_mu_);
    stats_.issued_device += issued_device;
    stats_.issued_host += issued_host;
    stats_.no_room += no_room;
    stats_.over_budget += stopped ? 1 : 0;
  }
  if (gather && !shards_->empty()) gather_ahead(window);
}

void prefetcher::gather_ahead(const std::vector<ahead>& window) {
  // In order, and only on what every rank sees alike: skipping one and
  // gathering a later one could pair different parameters across ranks.
  for (const ahead& a : window) {
    if (a.distance >= device_lookahead_) return;
    if (!shards_->contains(a.handle) || shards_->waiting(a.handle)) continue;
    if (shards_->in_use(a.handle)) return;  // kept or not: decided at its release
    if (shards_->ahead_bytes() + shards_->full_bytes(a.handle) > prefetch_bytes_) return;
    if (!shards_->gather(a.handle, true)) return;  // its acquire retries, and reports
  }
}

prefetcher::counters prefetcher::stats() {
  shard_gathers::counters g;
  {
    std::lock_guard walk(walk_mu_);  // before order_mu_, as a walk takes them
    g = shards_->stats();
  }
  const residency_manager::counters fills = buffers_.stats();
  std::lock_guard lock(order_mu_);
  counters c = stats_;
  c.hits = fills.prefetch_hits;
  c.late_fills = fills.late_fills;
  c.stall_ns = fills.stall_ns;
  c.wasted = fills.prefetch_wasted;
  c.wasted_bytes = fills.prefetch_wasted_bytes;
  c.gathers = g.gathers;
  c.gathers_ahead = g.gathers_ahead;
  c.gathers_reused = g.gathers_reused;
  c.reshards = g.reshards;
  c.gather_failures = g.gather_failures;
  c.gathered_bytes = g.gathered_bytes;
  return c;
}

}  // namespace strata
