// The sim device's modeled time (docs/device.md, "What driver calls
// cost"): the driver prices it charges, and each host thread's modeled
// clock on a timing-only device. A device with data sleeps its charges
// instead, in arrears of up to a millisecond, so short calls do not each
// pay a sleep's overshoot.
//
// Thread safety: the clocks and the unslept charges are each thread's own
// (thread_local); a device's serial comes from one atomic counter.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "sim_device.hpp"

namespace strata {

namespace {

// Each host thread's modeled clock per timing-only device it used, by the
// device's serial (never reused): a few entries, searched linearly; an
// entry stays for the thread's life (16 bytes).
struct thread_clock {
  std::uint64_t device;
  double seconds;
};
thread_local std::vector<thread_clock> thread_clocks;

std::atomic<std::uint64_t> next_serial{1};

double& clock_of(std::uint64_t device) {
  for (thread_clock& c : thread_clocks) {
    if (c.device == device) return c.seconds;
  }
  thread_clocks.push_back({device, 0.0});
  return thread_clocks.back().seconds;
}

// Driver costs a thread was charged on devices with data and has not slept
// yet (seconds; negative after a sleep overshot).
thread_local double unslept = 0;

}  // namespace

double sim_device::thread_clock() const {
  return timing_only() ? clock_of(serial_) : 0.0;
}

double sim_device::not_before() const {
  return timing_only() ? clock_of(serial_) + static_cast<double>(config_.gpu_lag_us) * 1e-6 : 0.0;
}

void sim_device::charge(double per_call, std::size_t calls, double per_unit, std::size_t bytes) {
  const std::size_t units = (bytes + sim_cost_unit - 1) / sim_cost_unit;
  const double us = per_call * static_cast<double>(calls) +
                    per_unit * static_cast<double>(units > calls ? units - calls : 0);
  if (us <= 0) return;
  const double seconds = us * 1e-6;
  if (timing_only()) {
    clock_of(serial_) += seconds;
    return;
  }
  unslept += seconds;
  if (unslept < 1e-3) return;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(unslept));
  unslept -= std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double sim_device::do_host_clock() {
  if (timing_only()) return clock_of(serial_);
  return device::do_host_clock() + std::max(unslept, 0.0);
}

void sim_device::host_reached(double t) {
  if (!timing_only()) return;
  double& now = clock_of(serial_);
  now = std::max(now, t);
}

std::uint64_t sim_device::new_serial() {
  return next_serial.fetch_add(1, std::memory_order_relaxed);
}

result<double> sim_device::do_modeled_clock() {
  if (!timing_only()) return device::do_modeled_clock();
  return thread_clock();
}

status sim_device::do_advance_modeled_clock(double seconds) {
  if (!timing_only()) return device::do_advance_modeled_clock(seconds);
  host_reached(seconds);
  return {};
}

}  // namespace strata
