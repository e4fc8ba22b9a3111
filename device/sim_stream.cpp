#include "sim_stream.hpp"

#include <algorithm>
#include <utility>

namespace strata {

sim_stream::sim_stream(std::chrono::microseconds op_delay, std::chrono::microseconds lag)
    : op_delay_(op_delay), lag_(lag), worker_([this] { run(); }) {}

sim_stream::~sim_stream() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

void sim_stream::enqueue(sim_op op, double not_before) {
  {
    std::lock_guard lock(mu_);
    const auto ready_at = lag_.count() > 0 ? std::chrono::steady_clock::now() + lag_
                                           : std::chrono::steady_clock::time_point{};
    queue_.push_back({std::move(op), not_before, ready_at});
    ++queued_;
  }
  work_cv_.notify_one();
}

double sim_stream::synchronize() {
  std::unique_lock lock(mu_);
  const auto target = queued_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
  return clock_;
}

void sim_stream::run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    auto [op, not_before, ready_at] = std::move(queue_.front());
    queue_.pop_front();
    const double start = std::max(clock_, not_before);
    lock.unlock();
    if (lag_.count() > 0) std::this_thread::sleep_until(ready_at);
    if (op_delay_.count() > 0) std::this_thread::sleep_for(op_delay_);
    const double end = op(start);
    lock.lock();
    clock_ = std::max(start, end);
    ++finished_;
    done_cv_.notify_all();
  }
}

void sim_mark::complete(double at) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    at_ = at;
  }
  cv_.notify_all();
}

bool sim_mark::done() {
  std::lock_guard lock(mu_);
  return done_;
}

double sim_mark::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return at_;
}

std::shared_ptr<sim_mark> sim_event::record() {
  auto mark = std::make_shared<sim_mark>();
  std::lock_guard lock(mu_);
  latest_ = mark;
  return mark;
}

std::shared_ptr<sim_mark> sim_event::latest() {
  std::lock_guard lock(mu_);
  return latest_;
}

}  // namespace strata
