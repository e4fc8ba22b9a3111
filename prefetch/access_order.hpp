// The recorded order of acquires and the cursor that follows it.
//
// Invariants: `prefix_[i]` is the bytes of accesses [0, i), so
// prefix_.back() is the bytes of a whole step; `positions_[h]` lists the
// positions of handle h in increasing order; 0 <= cursor_ <= size().
// Distances are in bytes of accesses from the cursor, wrapping from the end
// of the order to its start (the next step).
//
// Cost: follow() is O(1) in order, O(log k) for a re-sync (k: the handle's
// positions); next_use() is O(log k).
//
// Thread safety: none; the prefetcher guards it with its order mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace strata {

struct access {
  std::uint64_t handle;
  void* stream;
  std::uint64_t bytes;
  bool on_host = false;  // a host hold (acquire_host): fetched to the host, never the device
};

class access_order {
 public:
  explicit access_order(std::vector<access> order);

  [[nodiscard]] std::size_t size() const noexcept { return order_.size(); }
  [[nodiscard]] std::size_t cursor() const noexcept { return cursor_; }
  // The access `i` positions after the cursor (wrapping).
  [[nodiscard]] const access& ahead(std::size_t i) const;
  void rewind() noexcept { cursor_ = 0; }

  enum class match : std::uint8_t { in_order, resynced, unrecorded };
  struct followed {
    match how;
    std::size_t expected_at;        // the cursor before the acquire
    std::uint64_t expected_handle;  // the access recorded there
    std::size_t resumed_at;         // the position matched (resynced)
  };
  // Moves the cursor past an acquire of `handle`: the next recorded access
  // if it is `handle`, else the next position of `handle` after the cursor
  // (wrapping), else nowhere.
  followed follow(std::uint64_t handle);
  // Bytes of accesses from the cursor to the next access of `handle`
  // (wrapping), or UINT64_MAX if it is not in the order.
  [[nodiscard]] std::uint64_t next_use(std::uint64_t handle) const;

 private:
  // The first position of `handle` at or after `from` (wrapping); false if none.
  bool next_position(std::uint64_t handle, std::size_t from, std::size_t& at) const;

  std::vector<access> order_;
  std::vector<std::uint64_t> prefix_;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> positions_;
  std::size_t cursor_ = 0;
};

}  // namespace strata
