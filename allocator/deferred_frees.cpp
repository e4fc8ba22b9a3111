#include "deferred_frees.hpp"

#include <algorithm>

namespace strata {

deferred_frees::~deferred_frees() {
  for (auto& p : pending_) give_back(p.events);
  for (auto& b : sealed_batches_) give_back(b.events);
}

status deferred_frees::defer(pending_free p, stream_handle home, stream_handle free_stream,
                             bool device_wide) {
  auto rec = recorded_streams_.find(p.addr);
  if (!device_wide) {
    std::vector<stream_handle> streams;
    if (free_stream != home) streams.push_back(free_stream);
    if (rec != recorded_streams_.end()) {
      for (auto s : rec->second) {
        if (s != home && std::find(streams.begin(), streams.end(), s) == streams.end()) {
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
  (device_wide ? open_batch_ : pending_).push_back(std::move(p));
  return {};
}

void deferred_frees::record(std::uintptr_t addr, stream_handle home, stream_handle stream) {
  if (stream == home) return;
  auto& list = recorded_streams_[addr];
  if (std::find(list.begin(), list.end(), stream) == list.end()) list.push_back(stream);
  recorded_any_.store(true, std::memory_order_relaxed);
  note_stream(stream);
}

void deferred_frees::note_stream(stream_handle s) {
  if (std::find(seen_streams_.begin(), seen_streams_.end(), s) == seen_streams_.end()) {
    seen_streams_.push_back(s);
  }
}

status deferred_frees::seal_open_batch(std::vector<pending_free>& done) {
  sealed_batch batch;
  if (!record_events(seen_streams_, batch.events)) {
    // A stream we cannot record on (destroyed by its owner, say): fall back
    // to waiting for the whole device, then free the batch.
    const double start = dev_.host_clock();
    status sync = dev_.synchronize();
    ++stats_.num_device_waits;
    stats_.device_wait_ns += static_cast<std::int64_t>((dev_.host_clock() - start) * 1e9);
    if (!sync) return sync;
    ++stats_.num_sync_all_streams;
    for (auto& p : open_batch_) done.push_back(std::move(p));
    open_batch_.clear();
    return {};
  }
  batch.frees = std::move(open_batch_);
  open_batch_.clear();
  sealed_batches_.push_back(std::move(batch));
  return {};
}

status deferred_frees::record_events(const std::vector<stream_handle>& streams,
                                     std::vector<event_handle>& out) {
  for (auto s : streams) {
    auto e = events_.get();
    status st = e ? dev_.record_event(*e, s) : e.error();
    if (!st.ok()) {
      if (e) events_.put(*e);
      give_back(out);
      return st;
    }
    out.push_back(*e);
  }
  return {};
}

void deferred_frees::give_back(std::vector<event_handle>& events) {
  for (auto e : events) events_.put(e);
  events.clear();
}

yes_no deferred_frees::all_done(const std::vector<event_handle>& events) {
  for (auto e : events) {
    auto done = dev_.query_event(e);
    if (!done.ok()) return done.error();
    if (!done.yes()) return yes_no{false};
  }
  return yes_no{true};
}

status deferred_frees::take_completed(std::vector<pending_free>& done) {
  if (!open_batch_.empty()) {
    if (auto s = seal_open_batch(done); !s) return s;
  }
  for (std::size_t i = 0; i < pending_.size();) {
    auto complete = all_done(pending_[i].events);
    if (!complete.ok()) return complete.error();
    if (complete.yes()) {
      give_back(pending_[i].events);
      done.push_back(std::move(pending_[i]));
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
  while (!sealed_batches_.empty()) {
    auto complete = all_done(sealed_batches_.front().events);
    if (!complete.ok()) return complete.error();
    if (!complete.yes()) break;
    give_back(sealed_batches_.front().events);
    for (auto& p : sealed_batches_.front().frees) done.push_back(std::move(p));
    sealed_batches_.pop_front();
  }
  return {};
}

status deferred_frees::wait_all(std::vector<pending_free>& done) {
  if (!open_batch_.empty()) {
    if (auto s = seal_open_batch(done); !s) return s;
  }
  for (auto& batch : sealed_batches_) {
    for (auto e : batch.events) {
      if (auto s = dev_.synchronize_event(e); !s) return s;
    }
    ++stats_.num_sync_all_streams;
  }
  for (auto& p : pending_) {
    for (auto e : p.events) {
      if (auto s = dev_.synchronize_event(e); !s) return s;
    }
  }
  return take_completed(done);
}

}  // namespace strata
