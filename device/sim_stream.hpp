// A simulated stream (one FIFO worker thread) and a simulated event.
//
// Modeled time: every stream keeps a clock, the modeled time (seconds) at
// which its completed operations end. An operation starts at the later of
// that clock and the host's clock when it was queued (`not_before`), and
// returns when it ends; timing-only devices advance time this way instead of
// sleeping. Devices with data sleep their modeled time and leave the clock
// at zero.
//
// Invariants: operations run one at a time in the order they were queued;
// `finished_` counts completed operations and never passes `queued_`; the
// clock never goes back.
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

/// A stream operation: given the modeled time it starts at, does its work
/// and returns the modeled time it ends at (at least the start).
using sim_op = std::function<double(double start)>;

class sim_stream {
 public:
  /// `op_delay` is slept before each operation (models a slow stream);
  /// an operation starts no earlier than `lag` after it was queued, in
  /// real time (a GPU that runs behind; a timing-only device models its
  /// lag in `not_before` instead and passes 0).
  explicit sim_stream(std::chrono::microseconds op_delay,
                      std::chrono::microseconds lag = std::chrono::microseconds(0));
  sim_stream(const sim_stream&) = delete;
  sim_stream& operator=(const sim_stream&) = delete;
  sim_stream(sim_stream&&) = delete;
  sim_stream& operator=(sim_stream&&) = delete;
  /// Runs every queued operation, then stops the worker.
  ~sim_stream();

  /// Queues `op` behind everything queued before; it starts no earlier than
  /// the modeled time `not_before`.
  void enqueue(sim_op op, double not_before = 0);

  /// Blocks until every operation queued before this call has finished;
  /// returns the stream's clock then.
  double synchronize();

 private:
  struct queued {
    sim_op op;
    double not_before;
    std::chrono::steady_clock::time_point ready_at;
  };
  void run();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<queued> queue_;
  std::uint64_t queued_ = 0;
  std::uint64_t finished_ = 0;
  double clock_ = 0;
  bool stopping_ = false;
  std::chrono::microseconds op_delay_;
  std::chrono::microseconds lag_;
  std::thread worker_;  // last: starts after every other member exists
};

/// One point in a stream: done once the stream has run everything queued
/// before it, at the modeled time the stream had reached then.
class sim_mark {
 public:
  void complete(double at);
  bool done();
  /// Blocks until done; returns the modeled time of completion.
  double wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  double at_ = 0;
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
