// The blocks a trace reader has seen, in file order: which allocations are
// live, and which addresses were freed and not allocated again. It tells a
// free apart as the end of a live block, the end of a block allocated
// before the trace began (a seed of a warm trace), or a double free.
//
// Thread safety: a plain value, used by one reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "alloc_trace.hpp"

namespace strata::replay {

class block_ledger {
 public:
  /// Records `op` as live; returns the allocation it replaces at that
  /// address, if one was still live (a recording that lost its free).
  std::optional<trace_op> allocate(const trace_op& op) {
    freed_.erase(op.addr);
    std::optional<trace_op> old;
    if (auto it = live_.find(op.addr); it != live_.end()) old = it->second;
    live_.insert_or_assign(op.addr, op);
    return old;
  }

  struct freed {
    enum class kind : std::uint8_t { live, seed, double_free } what;
    trace_op alloc;           // kind::live: the allocation it ends
    std::size_t earlier = 0;  // kind::double_free: where the first free was
  };
  /// A free of `addr` found at `at` (an event index or a line). A double
  /// free changes nothing.
  freed free(std::uint64_t addr, std::size_t at) {
    freed f{freed::kind::seed, {}, 0};
    if (auto it = live_.find(addr); it != live_.end()) {
      f = {freed::kind::live, it->second, 0};
      live_.erase(it);
    } else if (auto was = freed_.find(addr); was != freed_.end()) {
      return {freed::kind::double_free, {}, was->second};
    }
    freed_[addr] = at;
    return f;
  }

  [[nodiscard]] bool live(std::uint64_t addr) const { return live_.contains(addr); }
  /// Where `addr` was last freed, if it was and was not allocated again.
  [[nodiscard]] std::optional<std::size_t> freed_at(std::uint64_t addr) const {
    auto it = freed_.find(addr);
    return it == freed_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  }

 private:
  std::unordered_map<std::uint64_t, trace_op> live_;
  std::unordered_map<std::uint64_t, std::size_t> freed_;
};

}  // namespace strata::replay
