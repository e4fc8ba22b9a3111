// A mutex that spins briefly before sleeping.
//
// The allocator's critical sections are short (tens of nanoseconds on the
// cached paths), so a waiter usually gets the lock while spinning, without
// the two system calls a sleeping std::mutex handoff costs. After a bounded
// spin it sleeps on the atomic (futex), so a holder that waits for the
// device does not burn the waiters' CPUs.
//
// Thread safety: a Lockable; use with std::lock_guard.
#pragma once

#include <atomic>

namespace strata {

class spin_mutex {
 public:
  void lock() noexcept {
    for (int i = 0; i < spins; ++i) {
      int expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(expected, 1, std::memory_order_acquire)) {
        return;
      }
      __builtin_ia32_pause();
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2);
  }
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  static constexpr int spins = 200;
  std::atomic<int> state_{0};  // 0 free, 1 held, 2 held and someone may sleep
};

}  // namespace strata
