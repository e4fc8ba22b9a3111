// A second thread that runs the calls handed to it, one at a time, while
// the caller waits: a replay issues some of a trace's calls from it, as a
// training step issues its backward pass's allocations from PyTorch's
// autograd thread (each thread with its own thread cache in Strata).
//
// Cost: two thread wake-ups per call (tens of microseconds), outside the
// timed allocator call. Thread safety: `run` from one thread at a time.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
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
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    worker_.join();
  }

  /// Runs `call` on the second thread and returns when it has finished.
  /// `call` must not throw.
  void run(const std::function<void()>& call) {
    std::unique_lock lock(mu_);
    call_ = &call;
    wake_.notify_one();
    done_.wait(lock, [this] { return call_ == nullptr; });
  }

 private:
  void serve() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || call_ != nullptr; });
      if (call_ == nullptr) return;  // stopping, nothing pending
      (*call_)();
      call_ = nullptr;
      done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void()>* call_ = nullptr;
  bool stop_ = false;
  std::thread worker_;  // last: started once the members it uses exist
};

}  // namespace strata::replay
