// A simulated stream (one FIFO worker thread) and a simulated event.
//
// Invariants: operations run one at a time in the order they were queued;
// `finished_` counts completed operations and never passes `queued_`.
// Cost: one mutex lock and one std::function per queued operation.
//
// Thread safety: every member may be called concurrently, except that the
// destructor must not race with other calls on the same object.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace strata {

class sim_stream {
 public:
  /// `op_delay` is slept before each operation (models a slow stream).
  explicit sim_stream(std::chrono::microseconds op_delay);
  sim_stream(const sim_stream&) = delete;
  sim_stream& operator=(const sim_stream&) = delete;
  sim_stream(sim_stream&&) = delete;
  sim_stream& operator=(sim_stream&&) = delete;
  /// Runs every queued operation, then stops the worker.
  ~sim_stream();

  /// Queues `op` behind everything queued before.
  void enqueue(std::function<void()> op);

  /// Blocks until every operation queued before this call has finished.
  void synchronize();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0;
  std::uint64_t finished_ = 0;
  bool stopping_ = false;
  std::chrono::microseconds op_delay_;
  std::thread worker_;  // last: starts after every other member exists
};

/// One point in a stream: done once the stream has run everything queued
/// before it.
class sim_mark {
 public:
  void complete();
  bool done();
  void wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

/// An event: the mark of its latest record. An event never recorded has no
/// mark and counts as complete. A wait holds on to the mark that was latest
/// when it started, so a later record does not change what it waits for.
class sim_event {
 public:
  /// Starts a new record: the returned mark becomes the latest.
  std::shared_ptr<sim_mark> record();
  /// The latest record's mark; null if never recorded.
  std::shared_ptr<sim_mark> latest();

 private:
  std::mutex mu_;
  std::shared_ptr<sim_mark> latest_;
};

}  // namespace strata
