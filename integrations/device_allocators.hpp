// One Strata allocator per device index, for the integrations (the preload
// shim and the LibTorch plugin): configured once from STRATA_CONF, created on
// first use, kept until the process ends (never destroyed at exit, when the
// CUDA driver may already be shutting down; the process's end returns the
// memory).
//
// Device specs: `auto` and `cuda` give device N the allocator of `cuda:N`
// (the integration follows the caller's current device); a `sim:...` spec
// gives each index its own sim device of that spec (tests). `cuda:N` is
// refused: a fixed ordinal would serve every device from one GPU.
//
// When Strata cannot start (a bad STRATA_CONF, no driver, no device), the
// reason is printed once on stderr and `get` returns null from then on, so
// the integration passes every call through instead of breaking the program.
//
// After fork(), Strata is off in the child (a pthread_atfork handler): the
// child has none of the parent's stream threads or driver context, so `get`
// and `owner_of` return null there and every call passes through to the
// real CUDA functions, which refuse use after fork as CUDA does. The
// parent goes on unaffected; the child writes no exit report.
//
// Thread safety: every member may be called concurrently. `get` is one
// atomic load once the device's allocator exists.
#pragma once

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "strata/allocator_options.hpp"
#include "strata/integration_options.hpp"
#include "strata/strata.hpp"

namespace strata::integration {

/// The stats as one JSON object {"name": value, ...} (names are ASCII
/// identifiers with dots, so nothing needs escaping).
std::string stats_json(const stat_map& stats);

class device_allocators {
 public:
  static constexpr int max_devices = 64;

  /// `who` names the integration in messages ("strata preload").
  explicit device_allocators(const char* who);
  device_allocators(const device_allocators&) = delete;
  device_allocators& operator=(const device_allocators&) = delete;
  device_allocators(device_allocators&&) = delete;
  device_allocators& operator=(device_allocators&&) = delete;
  ~device_allocators();

  /// In a child after fork(): Strata off, no allocator reachable. Called by
  /// the pthread_atfork child handler (async-signal-safe: atomic stores).
  void forked_child() noexcept;

  /// The allocator of device `index`, created on first use; null when
  /// Strata is off (see above) or `index` is not in [0, max_devices).
  allocator* get(int index) {
    if (index < 0 || index >= max_devices) return nullptr;
    allocator* a = allocators_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
    return a != nullptr ? a : create(index);
  }

  /// The allocator whose address space holds `ptr`, or null.
  allocator* owner_of(const void* ptr);

  /// Calls `f(index, allocator&)` for every allocator created so far.
  template <class F>
  void for_each(F f) {
    for (int i = 0; i < max_devices; ++i) {
      if (allocator* a = allocators_[static_cast<std::size_t>(i)].load(std::memory_order_acquire)) {
        f(i, *a);
      }
    }
  }

  /// False once Strata failed to start (the message went to stderr).
  [[nodiscard]] bool on() const { return !off_.load(std::memory_order_acquire); }

  /// Writes the stats, the memory summary and the last OOM report of every
  /// allocator to the STRATA_CONF `report_on_exit` path (nothing if unset);
  /// a path ending in ".pickle" gets each device's PyTorch memory snapshot
  /// instead (device N > 0 at PATH.deviceN.pickle). Errors go to stderr.
  /// Registered with atexit on first use.
  void write_report();

 private:
  void write_snapshots(const std::string& path);
  allocator* create(int index);
  // Stops Strata for good, saying why once.
  void turn_off(const std::string& why);

  const char* who_;
  std::array<std::atomic<allocator*>, max_devices> allocators_{};
  std::atomic<bool> off_{false};
  std::atomic<bool> forked_{false};
  std::mutex mu_;  // creation and the first configuration
  bool configured_ = false;
  allocator_options options_;
  integration_options integration_;
};

}  // namespace strata::integration
