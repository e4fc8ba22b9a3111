// The host kernels' thread pool.
//
// One job at a time: the caller writes the job (body, context, n, part
// size), bumps the generation under the mutex, wakes the workers, and takes
// parts itself. Parts are handed out by one atomic counter (a fetch_add per
// part, no lock). Workers sleep on a condition variable between jobs.
//
// Invariants: `job_mu` serializes jobs (concurrent callers queue). Every
// worker takes part in every job and reports when it has left it; the
// caller returns only once all have, so no worker reads a job's fields
// after the next job starts writing them.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "strata/kernels.hpp"

namespace strata {

struct kernel_pool::state {
  std::mutex job_mu;             // one job at a time
  std::mutex mu;                 // guards generation/stop for the workers' wait
  std::condition_variable wake;  // workers: a new job, or stop
  std::condition_variable left;  // the caller: a worker left the job
  std::uint64_t generation = 0;
  std::size_t finished = 0;  // workers done with the current generation
  bool stop = false;
  // The current job.
  range_fn body = nullptr;
  void* context = nullptr;
  std::size_t n = 0;
  std::size_t part = 0;  // elements per part
  std::size_t parts = 0;
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;

  // Takes parts until none is left.
  void work() {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < parts;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const std::size_t begin = i * part;
      body(context, begin, std::min(n, begin + part));
    }
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      work();
      {
        std::lock_guard lock(mu);
        ++finished;
      }
      left.notify_one();
    }
  }
};

result<std::unique_ptr<kernel_pool>> kernel_pool::create(unsigned threads) {
  if (threads > 1024) {
    return status{errc::invalid_argument,
                  "kernel_pool: " + std::to_string(threads) + " threads (at most 1024)"};
  }
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  auto s = std::make_unique<state>();
  // The pool owns the state from here: its destructor joins what started.
  std::unique_ptr<kernel_pool> pool(new kernel_pool(std::move(s)));
  try {
    for (unsigned i = 1; i < threads; ++i) {
      pool->s_->workers.emplace_back([st = pool->s_.get()] { st->worker_loop(); });
    }
  } catch (const std::system_error& e) {
    return status{errc::invalid_argument,
                  std::string("kernel_pool: cannot start a thread: ") + e.what()};
  }
  return pool;
}

kernel_pool::kernel_pool(std::unique_ptr<state> s) : s_(std::move(s)) {}

kernel_pool::~kernel_pool() {
  {
    std::lock_guard lock(s_->mu);
    s_->stop = true;
  }
  s_->wake.notify_all();
  for (auto& t : s_->workers) t.join();
}

unsigned kernel_pool::threads() const noexcept {
  return static_cast<unsigned>(s_->workers.size()) + 1;
}

void kernel_pool::parallel_for(std::size_t n, std::size_t grain, range_fn body, void* context) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  state& s = *s_;
  // About four parts per thread balance uneven progress; a part is a whole
  // number of grains.
  const std::size_t grains = (n + grain - 1) / grain;
  const std::size_t wanted = std::max<std::size_t>(1, std::size_t{threads()} * 4);
  const std::size_t part = (grains + wanted - 1) / wanted * grain;
  const std::size_t parts = (n + part - 1) / part;
  if (parts == 1 || s.workers.empty()) {
    body(context, 0, n);  // fast path: no other thread involved
    return;
  }
  std::lock_guard job(s.job_mu);
  s.body = body;
  s.context = context;
  s.n = n;
  s.part = part;
  s.parts = parts;
  s.next.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(s.mu);
    s.finished = 0;
    ++s.generation;
  }
  s.wake.notify_all();
  s.work();
  std::unique_lock lock(s.mu);
  s.left.wait(lock, [&] { return s.finished == s.workers.size(); });
}

}  // namespace strata
