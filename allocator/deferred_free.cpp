// Frees that cannot be reused at once: stream-ordered frees on another
// stream, frees of blocks used on recorded streams, and device-wide frees.
//
// A stream-ordered pending free carries the events recorded at free time
// and returns to its arena once all have completed. Device-wide frees are
// batched: the open batch costs nothing per free; it is sealed with one
// event per stream the allocator has seen when the cache needs memory.
#include <algorithm>

#include "caching_allocator.hpp"

namespace strata {

status caching_allocator::defer_free(const located& where, stream_handle free_stream,
                                     bool device_wide) {
  const auto addr = where.s != nullptr ? where.s->address(where.index) : where.block->first;
  pending_free p{where.owner, where.arena, addr, {}};
  auto rec = recorded_streams_.find(addr);
  if (!device_wide) {
    std::vector<stream_handle> streams;
    if (free_stream != where.owner->stream) streams.push_back(free_stream);
    if (rec != recorded_streams_.end()) {
      for (auto s : rec->second) {
        if (s != where.owner->stream &&
            std::find(streams.begin(), streams.end(), s) == streams.end()) {
          streams.push_back(s);
        }
      }
    }
    // On failure nothing has changed: the block is still allocated.
    if (auto st = record_events(streams, p.events); !st) return st;
    note_stream(free_stream);
  }
  if (rec != recorded_streams_.end()) {
    recorded_streams_.erase(rec);
    recorded_any_.store(!recorded_streams_.empty(), std::memory_order_relaxed);
  }
  count_free_request(where);
  if (device_wide) {
    open_batch_.push_back(std::move(p));
  } else {
    pending_.push_back(std::move(p));
  }
  return {};
}

status caching_allocator::seal_open_batch() {
  sealed_batch batch;
  if (!record_events(seen_streams_, batch.events)) {
    // A stream we cannot record on (destroyed by its owner, say): fall back
    // to waiting for the whole device, then free the batch.
    if (auto sync = dev_->synchronize(); !sync) return sync;
    ++stats_.num_sync_all_streams;
    for (auto& p : open_batch_) finish_pending(p);
    open_batch_.clear();
    return {};
  }
  batch.frees = std::move(open_batch_);
  open_batch_.clear();
  sealed_batches_.push_back(std::move(batch));
  return {};
}

status caching_allocator::record_events(const std::vector<stream_handle>& streams,
                                        std::vector<event_handle>& out) {
  for (auto s : streams) {
    auto e = events_.get();
    status st = e ? dev_->record_event(*e, s) : e.error();
    if (!st.ok()) {
      if (e) events_.put(*e);
      for (auto done : out) events_.put(done);
      out.clear();
      return st;
    }
    out.push_back(*e);
  }
  return {};
}

void caching_allocator::note_stream(stream_handle s) {
  if (std::find(seen_streams_.begin(), seen_streams_.end(), s) == seen_streams_.end()) {
    seen_streams_.push_back(s);
  }
}

void caching_allocator::finish_pending(pending_free& p) {
  for (auto e : p.events) events_.put(e);
  p.events.clear();
  finish_free(*p.owner, *p.arena, p.addr);
}

result<bool> caching_allocator::reclaim_completed() {
  if (!open_batch_.empty()) {
    if (auto s = seal_open_batch(); !s) return s;
  }
  const auto all_done = [&](const std::vector<event_handle>& events) -> result<bool> {
    for (auto e : events) {
      auto done = dev_->query_event(e);
      if (!done) return done.error();
      if (!*done) return false;
    }
    return true;
  };
  bool progress = false;
  for (std::size_t i = 0; i < pending_.size();) {
    auto done = all_done(pending_[i].events);
    if (!done) return done.error();
    if (*done) {
      finish_pending(pending_[i]);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
      progress = true;
    } else {
      ++i;
    }
  }
  while (!sealed_batches_.empty()) {
    auto done = all_done(sealed_batches_.front().events);
    if (!done) return done.error();
    if (!*done) break;
    for (auto e : sealed_batches_.front().events) events_.put(e);
    for (auto& p : sealed_batches_.front().frees) finish_pending(p);
    sealed_batches_.pop_front();
    progress = true;
  }
  return progress;
}

}  // namespace strata
