#include "stall_probes.hpp"

#include <chrono>

namespace strata {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void stall_probes::arrived(void* arg) {
  static_cast<slot*>(arg)->arrived_ns = now_ns();
}

void stall_probes::left(void* arg) {
  auto* s = static_cast<slot*>(arg);
  const std::int64_t waited = now_ns() - s->arrived_ns;
  stall_probes* owner = s->owner;
  owner->stall_ns_.fetch_add(static_cast<std::uint64_t>(waited > 0 ? waited : 0),
                             std::memory_order_relaxed);
  if (s->decide) (waited > late_after_ns ? owner->late_ : owner->hits_).fetch_add(1);
  s->busy.store(false, std::memory_order_release);
  owner->busy_.fetch_sub(1, std::memory_order_acq_rel);
}

status stall_probes::wait(device& d, stream_handle consumer, event_handle fill, bool decide,
                          bool& decided) {
  decided = false;
  slot* probe = nullptr;
  for (slot& s : slots_) {
    bool idle = false;
    if (s.busy.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
      probe = &s;
      break;
    }
  }
  if (probe == nullptr) return d.stream_wait_event(consumer, fill);
  probe->owner = this;
  probe->decide = decide;
  busy_.fetch_add(1, std::memory_order_acq_rel);
  status st = d.launch_host_fn(consumer, &stall_probes::arrived, probe);
  if (!st) {
    probe->busy.store(false, std::memory_order_release);
    busy_.fetch_sub(1, std::memory_order_acq_rel);
    return d.stream_wait_event(consumer, fill);
  }
  st = d.stream_wait_event(consumer, fill);
  decided = decide;
  // Always queued once the first is: it frees the slot.
  if (auto s = d.launch_host_fn(consumer, &stall_probes::left, probe); !s) {
    (void)d.synchronize_stream(consumer);  // the first ran; nothing else will free the slot
    decided = false;
    probe->busy.store(false, std::memory_order_release);
    busy_.fetch_sub(1, std::memory_order_acq_rel);
    if (st) st = s;
  }
  return st;
}

void stall_probes::drain(device& d) {
  if (busy_.load(std::memory_order_acquire) != 0) (void)d.synchronize();
}

}  // namespace strata
