// The end of the OOM chain: pressure handlers, the retry, and the report.
//
// The chain's first steps (reclaim, stitch, create, wait) run inside place()
// under the mutex. When they fail, the pressure handlers are called with
// the mutex released (a handler frees memory through this allocator), the
// request is retried once if they freed anything, and only then does the
// OOM stand: counted, traced, logged once to stderr, kept as the last OOM.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "caching_allocator.hpp"

namespace strata {

result<void*> caching_allocator::allocate_locked(thread_cache& tc, std::size_t bytes, void* native,
                                                 std::optional<oom_report>& report) {
  std::lock_guard lock(mu_);
  if (tc.owned_by(serial_)) unpark(tc);  // keeps this thread's peaks exact
  auto r = allocate(bytes, native);
  if (!r && r.error().code() == errc::out_of_memory) {
    report = std::move(oom_candidate_);  // empty for a host shortage: no report
    oom_candidate_.reset();
  }
  return r;
}

void caching_allocator::unpark(thread_cache& tc) {
  thread_cache::large_slot& ls = tc.slot();
  if (!ls.take(thread_cache::large_slot::parked, thread_cache::large_slot::empty)) return;
  // Move the user's last free of the block from the cache's counters to the
  // shared stats, and the block back to its arena, as if never parked.
  const std::size_t requested = ls.requested.load(std::memory_order_relaxed);
  count_slot(tc, thread_cache::direction::in, requested, -1);
  stream_state& st = *streams_.find(tc.stream())->second;
  located where;
  where.owner = &st;
  where.arena = st.large.get();
  where.block = st.large->blocks().find_in_use(ls.addr);
  where.block->second.holder = nullptr;
  where.block->second.requested = requested;
  count_free_request(where);
  finish_free(st, *st.large, ls.addr);
}

result<void*> caching_allocator::allocate_or_relieve(thread_cache& tc, std::size_t bytes,
                                                     void* native) {
  std::optional<oom_report> report;
  auto r = allocate_locked(tc, bytes, native, report);
  if (r || !report) return r;

  std::vector<std::shared_ptr<const pressure_handler>> handlers;
  {
    std::lock_guard lock(handlers_mu_);
    for (const auto& [id, h] : handlers_) handlers.push_back(h);
  }
  std::size_t asked = 0;
  std::size_t freed = 0;
  std::size_t failures = 0;
  if (!handlers.empty()) {
    asked = std::max(report->needed > report->obtainable ? report->needed - report->obtainable : 0,
                     granularity_);
    for (const auto& h : handlers) {
      try {
        freed += (*h)(asked - std::min(freed, asked));
      } catch (...) {
        ++failures;  // a failing handler does not break the chain
      }
      if (freed >= asked) break;
    }
    if (freed > 0) {
      {
        std::lock_guard lock(mu_);
        ++stats_.num_alloc_retries;
      }
      std::optional<oom_report> again;
      r = allocate_locked(tc, bytes, native, again);
      if (r || r.error().code() != errc::out_of_memory) return r;
      if (again) report = std::move(again);  // the newer numbers
    }
  }

  std::string text;
  {
    std::lock_guard lock(mu_);
    oom_report rep = std::move(*report);
    rep.handlers_asked = asked;
    rep.handlers_freed = freed;
    rep.handler_failures = failures;
    ++stats_.num_ooms;
    // As PyTorch: the address slot holds the device's free bytes then.
    if (trace_.on()) trace_.record(trace_action::oom, rep.device_free, bytes, native);
    text = rep.to_text();
    last_oom_ = std::move(rep);
  }
  if (options_.log_ooms) std::fprintf(stderr, "strata: %s\n", text.c_str());
  return status{errc::out_of_memory, std::move(text)};
}

std::size_t caching_allocator::pages_needed(std::size_t bytes) const {
  if (bytes > max_request) return bytes;
  const std::size_t size = bytes <= classes_.slab_limit()
                               ? classes_.slab_bytes(size_classes::class_of(bytes))
                               : size_classes::round(bytes);
  return (size + granularity_ - 1) / granularity_ * granularity_;
}

oom_report caching_allocator::build_oom_report(std::size_t bytes, stream_handle stream) {
  oom_report r;
  r.requested = bytes;
  r.needed = pages_needed(bytes);
  r.stream = reinterpret_cast<std::uintptr_t>(stream.native);
  r.capacity = total_;
  r.limit = limit_;
  r.memory_fraction = options_.memory_fraction;
  if (auto info = dev_->get_memory_info()) {
    r.device_free = info->free;
    r.device_free_known = true;
  }
  const allocator_stats view = current_stats();
  r.allocated = static_cast<std::size_t>(view.allocated_bytes[pool_all].current);
  r.reserved = held_pages_ * granularity_;
  r.reserved_unallocated = r.reserved > r.allocated ? r.reserved - r.allocated : 0;
  std::size_t may_create = limit_ > r.reserved ? limit_ - r.reserved : 0;
  if (r.device_free_known) may_create = std::min(may_create, r.device_free);
  r.idle = idle_pages_.size() * granularity_;
  r.obtainable = r.idle + may_create;

  std::vector<oom_report::live_block> live;
  for (std::size_t k = 0; k < arenas_.size(); ++k) {
    stream_arena& a = *arenas_[k];
    const auto native = reinterpret_cast<std::uintptr_t>(owners_[k]->stream.native);
    for (auto it = a.blocks().begin(); it != a.blocks().end(); ++it) {
      const block_info& b = it->second;
      if (b.state == block_state::free) {
        if (b.mapped) r.largest_free_range = std::max(r.largest_free_range, b.size);
      } else if (b.state == block_state::allocated && a.kind() == pool_kind::large) {
        live.push_back({it->first, b.size, native});
      }
    }
  }
  const std::size_t top = std::min<std::size_t>(live.size(), 10);
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(top), live.end(),
                    [](const auto& x, const auto& y) { return x.size > y.size; });
  live.resize(top);
  r.largest_live = std::move(live);

  std::map<std::uintptr_t, std::size_t> pending_by_stream;
  const auto add_pending = [&](const pending_free& p) {
    std::size_t size = 0;
    if (p.arena->kind() == pool_kind::small) {
      size = p.arena->slab_of(p.addr)->object_size;
    } else if (auto it = p.arena->blocks().find_in_use(p.addr); it != p.arena->blocks().end()) {
      size = it->second.size;
    }
    r.pending_bytes += size;
    pending_by_stream[reinterpret_cast<std::uintptr_t>(p.owner->stream.native)] += size;
  };
  for (const auto& p : pending_) add_pending(p);
  for (const auto& p : open_batch_) add_pending(p);
  for (const auto& b : sealed_batches_) {
    for (const auto& p : b.frees) add_pending(p);
  }
  for (const auto& [native, size] : pending_by_stream) {
    if (size > r.pending_on_stream) {
      r.pending_on_stream = size;
      r.pending_stream = native;
    }
  }
  r.decide();
  return r;
}

status caching_allocator::out_of_memory(std::size_t bytes, stream_handle stream) {
  oom_candidate_ = build_oom_report(bytes, stream);
  return {errc::out_of_memory, oom_candidate_->to_text()};
}

std::uint64_t caching_allocator::add_pressure_handler(pressure_handler h) {
  std::lock_guard lock(handlers_mu_);
  const std::uint64_t id = next_handler_++;
  handlers_.emplace_back(id, std::make_shared<const pressure_handler>(std::move(h)));
  return id;
}

status caching_allocator::remove_pressure_handler(std::uint64_t id) {
  std::lock_guard lock(handlers_mu_);
  const auto n = std::erase_if(handlers_, [&](const auto& e) { return e.first == id; });
  if (n == 0) {
    return {errc::invalid_argument,
            "remove_pressure_handler: no handler with id " + std::to_string(id)};
  }
  return {};
}

std::string caching_allocator::last_oom_report() {
  std::lock_guard lock(mu_);
  return last_oom_ ? last_oom_->to_json() : std::string("null");
}

std::string caching_allocator::trace_json() {
  std::lock_guard lock(mu_);
  return trace_.to_json();
}

}  // namespace strata
