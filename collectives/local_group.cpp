#include "local_group.hpp"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

namespace strata {

local_group::local_group(int ranks, const local_comm_options& options,
                         std::unique_ptr<kernel_pool> pool, bool move_data)
    : ranks_(ranks),
      modeled_(options.modeled_ranks != 0 ? static_cast<int>(options.modeled_ranks) : ranks),
      options_(options),
      pool_(std::move(pool)),
      move_data_(move_data) {}

status local_group::failed() const {
  std::lock_guard lock(mu_);
  return failed_.ok() ? status{} : status{failed_.code(), failed_.message()};
}

void local_group::fail(status why) {
  {
    std::lock_guard lock(mu_);
    if (failed_.ok()) failed_ = std::move(why);
  }
  arrived_.notify_all();
}

std::string local_group::mismatch(std::uint64_t seq, const slot& s) const {
  const collective_call& first = *s.calls[0];
  for (int r = 1; r < ranks_; ++r) {
    const collective_call& c = *s.calls[static_cast<std::size_t>(r)];
    const bool same =
        c.kind == first.kind && c.count == first.count && c.type == first.type &&
        (c.kind == collective::all_gather || c.kind == collective::broadcast || c.op == first.op) &&
        (c.kind != collective::broadcast || c.root == first.root);
    if (same) continue;
    const auto describe = [](const collective_call& x) {
      std::string d = std::string(collective_name(x.kind)) + " of " + std::to_string(x.count) +
                      (x.type == dtype::f32    ? " f32"
                       : x.type == dtype::bf16 ? " bf16"
                                               : " f16");
      if (x.kind == collective::broadcast) d += " from root " + std::to_string(x.root);
      if (x.kind == collective::all_reduce || x.kind == collective::reduce_scatter) {
        d += x.op == reduce_op::sum ? " (sum)" : " (avg)";
      }
      return d;
    };
    return "local communicator: collective #" + std::to_string(seq) + " does not match: rank 0 " +
           "calls " + describe(first) + ", rank " + std::to_string(r) + " calls " + describe(c);
  }
  return {};
}

double local_group::modeled_seconds(const collective_call& call) const {
  const double n = modeled_;
  const auto bytes = static_cast<double>(call.count * dtype_size(call.type));
  double moved = 0;  // bytes each rank sends over its link
  switch (call.kind) {
    case collective::all_reduce:
      moved = 2 * (n - 1) / n * bytes;
      break;
    case collective::reduce_scatter:
    case collective::all_gather:
      moved = (n - 1) * bytes;  // (n - 1) / n of the full n * count buffer
      break;
    case collective::broadcast:
      moved = bytes;
      break;
  }
  const double link = options_.link_gbps > 0 ? moved / (options_.link_gbps * 1e9) : 0;
  // At most a day: the time becomes a duration in nanoseconds (int64).
  return std::min(link + options_.latency_us * 1e-6, 86400.0);
}

status local_group::join(std::uint64_t seq, int rank, const collective_call& call, double start,
                         double& ends) {
  ends = start;
  std::unique_lock lock(mu_);
  if (!failed_.ok()) return {failed_.code(), failed_.message()};
  slot& s = slots_[seq];
  if (s.calls.empty()) s.calls.resize(static_cast<std::size_t>(ranks_));
  s.calls[static_cast<std::size_t>(rank)] = call;
  s.latest_start = std::max(s.latest_start, start);
  if (++s.arrived == ranks_) {
    const auto now = std::chrono::steady_clock::now();
    if (std::string why = mismatch(seq, s); !why.empty()) {
      failed_ = status{errc::comm_error, std::move(why)};
    } else {
      // The calls stay put until every rank has left: run without the lock.
      lock.unlock();
      if (move_data_) run_local_collective(s.calls, *pool_);
      lock.lock();
      const double seconds = modeled_seconds(call);
      s.finish = move_data_ ? now + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::duration<double>(seconds))
                            : now;
      s.ends = s.latest_start + seconds;
      s.done = true;
    }
    arrived_.notify_all();
  } else {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    const bool woke = arrived_.wait_until(lock, deadline, [&] { return s.done || !failed_.ok(); });
    if (!woke && failed_.ok()) {
      std::string missing;
      for (int r = 0; r < ranks_; ++r) {
        if (s.calls[static_cast<std::size_t>(r)]) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      failed_ = status{errc::comm_error,
                       "local communicator: " + std::string(collective_name(call.kind)) +
                           " (collective #" + std::to_string(seq) + ") timed out after " +
                           std::to_string(options_.timeout.count()) + " ms: rank(s) " + missing +
                           " never joined"};
      arrived_.notify_all();
    }
  }
  const bool ran = s.done;
  const auto finish = s.finish;
  if (ran && !move_data_) ends = s.ends;
  // The last to leave removes the slot (after a failure, ranks that come
  // later stop at the failure and never look for it).
  if (++s.left == s.arrived) slots_.erase(seq);
  if (!ran) return {failed_.code(), failed_.message()};
  lock.unlock();
  std::this_thread::sleep_until(finish);
  return {};
}

}  // namespace strata
