#include "sim_stream.hpp"

#include <utility>

namespace strata {

sim_stream::sim_stream(std::chrono::microseconds op_delay)
    : op_delay_(op_delay), worker_([this] { run(); }) {}

sim_stream::~sim_stream() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

void sim_stream::enqueue(std::function<void()> op) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(op));
    ++queued_;
  }
  work_cv_.notify_one();
}

void sim_stream::synchronize() {
  std::unique_lock lock(mu_);
  const auto target = queued_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
}

void sim_stream::run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    auto op = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (op_delay_.count() > 0) std::this_thread::sleep_for(op_delay_);
    op();
    lock.lock();
    ++finished_;
    done_cv_.notify_all();
  }
}

void sim_mark::complete() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

bool sim_mark::done() {
  std::lock_guard lock(mu_);
  return done_;
}

void sim_mark::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
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
