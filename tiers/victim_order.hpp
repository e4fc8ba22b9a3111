// Which released buffer the residency manager moves down a tier first: the
// one the eviction oracle says is needed last, else the least recently
// released; those the oracle says are needed within `keep_within` only when
// no other is left. Among those the oracle keeps alike, one the caller
// prefers goes before the others (making host room: a buffer whose pinned
// memory the new one can take over). It owns what decides that: the
// release clock, the oracle, the limit a prefetch making device room keeps
// to, and the buffers one spill passed over.
//
// Cost: pick() looks at every registered buffer once (the oracle called
// for each candidate).
//
// Thread safety: none of its own; the core calls it under its mutex.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "strata/residency_types.hpp"

namespace strata {

template <class Buffer>
class victim_order {
 public:
  using oracle = std::function<std::uint64_t(std::uint64_t handle)>;

  /// The next tick of the release clock: a release (or a fill for use)
  /// stamps its buffer with it.
  [[nodiscard]] std::uint64_t stamp() noexcept { return ++tick_; }

  /// residency_manager::set_eviction_oracle.
  void set_oracle(oracle next_use, std::uint64_t keep_within) {
    oracle_ = std::move(next_use);
    keep_within_ = keep_within;
  }

  /// Which goes first (larger: sooner): the oracle's next use of `handle`,
  /// else the least recently released.
  [[nodiscard]] std::uint64_t key(std::uint64_t handle, std::uint64_t released_at) const {
    return oracle_ ? oracle_(handle) : ~released_at;
  }

  /// The buffer of `buffers` (handle -> Buffer, each with `released_at`)
  /// to move down from tier `from` next, among those `movable` accepts and
  /// no spill passed over; null if none. With `limit` (or, from the device,
  /// the limit set by limit_to), only one the oracle says is needed later
  /// than it; without an oracle a limit is ignored (a released buffer's
  /// next use is unknown: later). Among those the oracle does not keep (or
  /// among the kept, when only they are left), one `preferred` accepts goes
  /// before one it does not, then the order above decides.
  template <class Buffers, class Movable, class Preferred>
  Buffer* pick(Buffers& buffers, tier from, const std::uint64_t* limit, Movable movable,
               Preferred preferred) const {
    if (limit == nullptr && from == tier::device) limit = limit_;
    if (!oracle_) limit = nullptr;
    Buffer* best = nullptr;
    std::uint64_t best_key = 0;
    bool best_kept = true;
    bool best_preferred = false;
    for (auto& [handle, b] : buffers) {
      if (!movable(b)) continue;
      if (std::find(passed_over_.begin(), passed_over_.end(), &b) != passed_over_.end()) continue;
      const std::uint64_t k = key(handle, b.released_at);
      if (limit != nullptr && k <= *limit) continue;
      const bool kept = oracle_ && k <= keep_within_;
      const bool pref = preferred(b);
      const bool better = best == nullptr || (best_kept && !kept) ||
                          (kept == best_kept && (pref != best_preferred ? pref : k > best_key));
      if (better) {
        best = &b;
        best_key = k;
        best_kept = kept;
        best_preferred = pref;
      }
    }
    return best;
  }

  /// Until the returned scope ends, picks from the device keep to `limit`
  /// (a prefetch making device room: the pressure handler a device
  /// allocation calls spills within it). Scopes nest.
  class limit_scope {
   public:
    limit_scope(victim_order& order, const std::uint64_t* limit)
        : order_(order), outer_(std::exchange(order.limit_, limit)) {}
    limit_scope(const limit_scope&) = delete;
    limit_scope& operator=(const limit_scope&) = delete;
    limit_scope(limit_scope&&) = delete;
    limit_scope& operator=(limit_scope&&) = delete;
    ~limit_scope() { order_.limit_ = outer_; }

   private:
    victim_order& order_;
    const std::uint64_t* outer_;
  };
  [[nodiscard]] limit_scope limit_to(const std::uint64_t* limit) { return {*this, limit}; }

  /// `b` stays where it is for the rest of this spill: picks skip it.
  void pass_over(const Buffer* b) { passed_over_.push_back(b); }
  /// The spill is over: every buffer may be picked again.
  void end_spill() noexcept { passed_over_.clear(); }

 private:
  std::uint64_t tick_ = 0;
  oracle oracle_;
  std::uint64_t keep_within_ = 0;
  const std::uint64_t* limit_ = nullptr;
  std::vector<const Buffer*> passed_over_;
};

}  // namespace strata
