// The end of the OOM chain: pressure handlers, the retry, and the report.
//
// The chain's first steps (reclaim, stitch, create, wait) run inside place()
// under the mutex. When they fail, the pressure handlers are called with
// the mutex released (a handler frees memory through this allocator), the
// request is retried while they free something (asked again, for more,
// after each retry that fails), and only then does the
// OOM stand: counted, traced, logged once to stderr, kept as the last OOM.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>

#include "caching_allocator.hpp"

namespace strata {

attempt<void*> caching_allocator::allocate_locked(thread_cache& tc, std::size_t bytes,
                                                  void* native) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (tc.owned_by(caches_.serial())) unpark(tc);  // keeps this thread's peaks exact
  attempt<void*> r = allocate(bytes, native);
  count_locked_call(start);
  return r;
}

void caching_allocator::unpark(thread_cache& tc) {
  thread_cache::large_slot& ls = tc.slot();
  if (!ls.take(thread_cache::large_slot::parked, thread_cache::large_slot::empty)) return;
  // Move the user's last free of the block from the cache's counters to the
  // shared stats, and the block back to its arena, as if never parked.
  const std::size_t requested = ls.requested.load(std::memory_order_relaxed);
  caches_.count_slot(tc, thread_cache::direction::in, requested, -1);
  stream_state& st = *streams_.find(tc.stream());
  located where;
  where.owner = &st;
  where.arena = st.large.get();
  where.block = where.arena->blocks().find_in_use(ls.addr);
  where.block->second.holder = nullptr;
  where.block->second.requested = requested;
  count_free_request(where);
  finish_free_block(st, *where.arena, where.block);
}

result<void*> caching_allocator::allocate_or_relieve(thread_cache& tc, std::size_t bytes,
                                                     void* native) {
  auto r = allocate_locked(tc, bytes, native);
  if (r || !r.report()) return std::move(r).take();
  oom_report report = std::move(*r.report());

  // The handlers are asked for what the request lacks, at least a page,
  // and asked again while they free something and the retry still fails:
  // bytes they free may share pages with live blocks (a spilled buffer
  // smaller than a page, or one not page-aligned), so freeing what the
  // request lacks need not free whole pages. Each ask is at least twice
  // the one before, so the rounds are few (about log2 of the memory the
  // handlers hold over the request's shortfall); they end once the
  // handlers free nothing.
  pressure_handlers::outcome relief;
  std::size_t ask = 0;
  for (;;) {
    const std::size_t lacking =
        report.needed > report.obtainable ? report.needed - report.obtainable : 0;
    ask = std::max({lacking, pages_.granularity(),
                    ask > std::numeric_limits<std::size_t>::max() / 2
                        ? std::numeric_limits<std::size_t>::max()
                        : 2 * ask});
    const auto round = handlers_.relieve(ask);
    relief.asked += round.asked;
    relief.freed += round.freed;
    relief.failures += round.failures;
    if (round.freed == 0) break;
    {
      std::lock_guard lock(mu_);
      ++stats_.num_alloc_retries;
    }
    auto again = allocate_locked(tc, bytes, native);
    if (again || again.error().code() != errc::out_of_memory) return std::move(again).take();
    if (!again.report()) return std::move(again).take();
    report = std::move(*again.report());
  }

  std::string text;
  {
    std::lock_guard lock(mu_);
    describe_oom(report);  // the whole report, from the numbers now
    report.handlers_asked = relief.asked;
    report.handlers_freed = relief.freed;
    report.handler_failures = relief.failures;
    ++stats_.num_ooms;
    // As PyTorch: the address slot holds the device's free bytes then.
    if (trace_.on()) trace_.record(trace_action::oom, report.device_free, bytes, native);
    text = report.to_text();
    last_oom_ = std::move(report);
  }
  if (options_.log_ooms) std::fprintf(stderr, "strata: %s\n", text.c_str());
  return status{errc::out_of_memory, std::move(text)};
}

yes_no caching_allocator::relieve_shortage(bool pressure) {
  if (reclaim_parked_slots() > 0) return yes_no{true};
  // This thread's parked small objects go back to their slabs, which may
  // then empty and be dropped below.
  if (thread_cache& tc = thread_cache::current();
      tc.owned_by(caches_.serial()) && tc.holds_objects()) {
    flush_cache(tc);
    return yes_no{true};
  }
  auto reclaimed = reclaim_completed();
  if (!reclaimed.ok() || reclaimed.yes()) return reclaimed;
  // Empty cached slabs go before the allocator grows (wait_before_grow) or
  // when it cannot grow.
  if ((pressure || options_.wait_before_grow) && drop_empty_slabs() > 0) return yes_no{true};
  if (!anything_waiting()) return yes_no{false};
  if (auto s = wait_for_everything(); !s) return s;
  return yes_no{true};
}

bool caching_allocator::anything_waiting() {
  // Pending frees, or idle pages another stream's work still holds: only
  // these can give memory back by waiting (a stream's own freed pages are
  // reusable on it at once).
  return !frees_.empty() || pages_.waiting_on_epochs();
}

yes_no caching_allocator::reclaim_completed() {
  completed_.clear();
  status s = frees_.take_completed(completed_);
  // What completed goes back even when a later query failed.
  for (auto& p : completed_) finish_free(*p.owner, *p.arena, p.addr);
  const bool any = !completed_.empty();
  completed_.clear();
  if (!s) return s;
  return yes_no{any};
}

status caching_allocator::finish_all_deferred() {
  completed_.clear();
  status s = frees_.wait_all(completed_);
  for (auto& p : completed_) finish_free(*p.owner, *p.arena, p.addr);
  completed_.clear();
  return s;
}

status caching_allocator::wait_for_everything() {
  const double start = dev_->host_clock();
  status s = finish_all_deferred();
  for (stream_arena* a : streams_.arenas()) {
    if (!s) break;
    s = a->wait_idle(a->open_epoch(), *dev_, events_);
  }
  ++stats_.num_device_waits;
  stats_.device_wait_ns += static_cast<std::int64_t>((dev_->host_clock() - start) * 1e9);
  return s;
}

std::uint64_t caching_allocator::add_pressure_handler(pressure_handler h) {
  return handlers_.add(std::move(h));
}

status caching_allocator::remove_pressure_handler(std::uint64_t id) {
  return handlers_.remove(id);
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
