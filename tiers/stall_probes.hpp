// How long consuming streams wait for fills: a probe is two host functions
// queued on the consuming stream around its wait for a fill's event; the
// first notes when the stream got there, the second when it went on. Their
// difference is the stall, measured on the stream itself (not the thread
// that queued the wait).
//
// Invariants: a slot is busy from `wait` until its second host function has
// run; the probes' owner outlives every busy slot (drain waits for them).
// Cost: two host functions per measured wait; only late fills are measured.
//
// Thread safety: `wait` is called under the residency manager's mutex;
// the host functions run on driver threads and touch only their slot and
// the atomic total.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "strata/device.hpp"
#include "strata/error.hpp"

namespace strata {

// Nanoseconds from `since` to now: how the residency manager times the
// waits it does on a thread (fills, reads in flight).
inline std::uint64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since)
          .count());
}

class stall_probes {
 public:
  // Queues on `consumer` a wait for `fill`, with a probe around it when a
  // slot is free (without one, the wait is still queued, not measured).
  // With `decide`, the probe also counts the fill as a hit (the stream
  // waited at most late_after_ns) or a late fill; false if it cannot (no
  // slot): the caller counts it.
  status wait(device& d, stream_handle consumer, event_handle fill, bool decide, bool& decided);
  // Nanoseconds consuming streams have stalled, over every finished probe.
  [[nodiscard]] std::uint64_t stall_ns() const noexcept {
    return stall_ns_.load(std::memory_order_relaxed);
  }
  // Fills the probes found done (hits) or waited for (late).
  [[nodiscard]] std::uint64_t hits() const noexcept {
    return hits_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t late() const noexcept {
    return late_.load(std::memory_order_relaxed);
  }
  // A wait up to this long is the probe's own cost (two host functions),
  // not a stall for the fill.
  static constexpr std::int64_t late_after_ns = 50'000;
  // Waits until no probe is in flight (the device is synchronized if one is).
  void drain(device& d);

 private:
  struct slot {
    std::atomic<bool> busy{false};
    std::int64_t arrived_ns = 0;  // written by the first host function
    stall_probes* owner = nullptr;
    bool decide = false;
  };
  static void arrived(void* arg);
  static void left(void* arg);

  std::array<slot, 64> slots_{};
  std::atomic<std::uint64_t> stall_ns_{0};
  std::atomic<std::uint64_t> hits_{0};
  std::atomic<std::uint64_t> late_{0};
  std::atomic<unsigned> busy_{0};
};

}  // namespace strata
