// A second thread that runs the calls handed to it, one at a time, while
// the caller waits: a replay issues some of a trace's calls from it, as a
// training step issues its backward pass's allocations from PyTorch's
// autograd thread (each thread with its own thread cache in Strata).
//
// The hand-off is one atomic word each way. Each side spins on it a little,
// then yields a little (a backward pass hands over one call after another),
// then sleeps on it (std::atomic wait, a futex); a call handed over costs
// about a microsecond where a futex wake-up costs tens on a busy host. All
// of it is outside the timed allocator call.
// Thread safety: `run` from one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace strata::replay {

class second_thread {
 public:
  second_thread() : worker_([this] { serve(); }) {}
  second_thread(const second_thread&) = delete;
  second_thread& operator=(const second_thread&) = delete;
  second_thread(second_thread&&) = delete;
  second_thread& operator=(second_thread&&) = delete;
  ~second_thread() {
    turn_.store(stopping, std::memory_order_release);
    turn_.notify_one();
    worker_.join();
  }

  /// Runs `call` on the second thread and returns when it has finished.
  /// `call` must not throw.
  void run(const std::function<void()>& call) {
    call_ = &call;
    turn_.store(pending, std::memory_order_release);
    turn_.notify_one();
    await_change(pending);
  }

 private:
  // turn_: idle (the caller's turn), pending (a call for the worker), or
  // stopping. The caller writes call_ before pending; the worker reads it
  // after seeing pending and hands back with idle.
  static constexpr std::uint32_t idle = 0;
  static constexpr std::uint32_t pending = 1;
  static constexpr std::uint32_t stopping = 2;

  static constexpr int spins = 64;   // reads with a pause between
  static constexpr int yields = 64;  // then reads with a yield between

  // Returns once turn_ is no longer `from`. A short spin catches a call
  // handed straight back; yields let the other thread run where the cores
  // are busy (ctest -j2: a spin alone there took 8 x the time).
  void await_change(std::uint32_t from) {
    for (int i = 0; i < spins; ++i) {
      if (turn_.load(std::memory_order_acquire) != from) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    for (int i = 0; i < yields; ++i) {
      if (turn_.load(std::memory_order_acquire) != from) return;
      std::this_thread::yield();
    }
    while (turn_.load(std::memory_order_acquire) == from) {
      turn_.wait(from, std::memory_order_acquire);
    }
  }

  void serve() {
    for (;;) {
      await_change(idle);  // only this thread sets idle: now pending or stopping
      if (turn_.load(std::memory_order_acquire) == stopping) return;
      (*call_)();
      turn_.store(idle, std::memory_order_release);
      turn_.notify_one();
    }
  }

  std::atomic<std::uint32_t> turn_{idle};
  const std::function<void()>* call_ = nullptr;
  std::thread worker_;  // last: started once the members it uses exist
};

}  // namespace strata::replay
