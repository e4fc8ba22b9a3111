// The meeting point of the `local` communicator's ranks: each collective is
// a slot, keyed by its sequence number (a rank's n-th collective call meets
// every other rank's n-th). Ranks join from their streams' threads (a host
// function queued by the call); the last to arrive checks that the calls
// match and runs the collective over every rank's buffers; every rank then
// waits out the modeled link time before its stream goes on. On timing-only
// devices the time is modeled, not waited out: the collective starts when
// the last rank's stream reaches it (in modeled time) and every rank's
// stream goes on at that start plus the link time.
//
// Invariants: a slot exists from its first arrival until its last rank has
// left; `failed_` once set never clears, and a slot joined after it is never
// run. The first failure wins: its message is what every rank reports.
//
// Cost: one lock per join plus the waits; the data movement runs without the
// lock, on the last arriver's thread.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "strata/communicator.hpp"
#include "strata/kernels.hpp"

namespace strata {

class local_group {
 public:
  /// `move_data` false: timing-only devices; collectives take their
  /// modeled time and move nothing.
  local_group(int ranks, const local_comm_options& options, std::unique_ptr<kernel_pool> pool,
              bool move_data);

  /// The ranks that join each collective (one per device).
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  /// The ranks the group stands for (local_comm_options::modeled_ranks):
  /// the communicators' size and the ring of the modeled time.
  [[nodiscard]] int modeled_ranks() const noexcept { return modeled_; }

  /// Rank `rank` arrives at collective `seq` with `call`, its stream at
  /// modeled time `start`; returns once the collective has run on every
  /// rank and (with data) its modeled time has passed, or with the group's
  /// failure (a mismatch, a timeout, an earlier failure). `ends` is set to
  /// the modeled time the collective ends at (timing only; else `start`).
  status join(std::uint64_t seq, int rank, const collective_call& call, double start, double& ends);

  /// Fails the group with `why` (the first failure is kept) and wakes every
  /// waiting rank.
  void fail(status why);

  /// OK, or the group's failure.
  [[nodiscard]] status failed() const;

 private:
  struct slot {
    std::vector<std::optional<collective_call>> calls;
    int arrived = 0;
    int left = 0;
    bool done = false;
    std::chrono::steady_clock::time_point finish{};
    double latest_start = 0;  // modeled: the last rank's arrival
    double ends = 0;          // modeled: when the collective ends
  };
  // Empty if every call matches rank 0's, else why not. Called with the
  // calls of a full slot.
  [[nodiscard]] std::string mismatch(std::uint64_t seq, const slot& s) const;
  // The ring's modeled time for a matched collective, in seconds.
  [[nodiscard]] double modeled_seconds(const collective_call& call) const;

  const int ranks_;
  const int modeled_;
  const local_comm_options options_;
  std::unique_ptr<kernel_pool> pool_;  // the casts of bf16/fp16 reductions
  const bool move_data_;
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::unordered_map<std::uint64_t, slot> slots_;
  status failed_;
};

/// Runs a matched collective over every rank's call (indexed by rank),
/// moving the bytes with the host. In place as the interface allows.
/// Reductions: fp32 in rank order, avg divided by the rank count once,
/// rounded once to the dtype.
void run_local_collective(const std::vector<std::optional<collective_call>>& calls,
                          kernel_pool& pool);

}  // namespace strata
