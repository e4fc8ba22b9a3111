// The space of a file: ranges handed out in multiples of an alignment, first
// fit, freed ranges merged with their neighbours; the space grows at its end
// when no free range fits, up to `limit` bytes. The sim device's memfd and
// the NVMe store's file are carved this way; growing the file itself is the
// owner's job (end() says how far).
//
// Cost: O(log n) per call in the number of free ranges, plus the scan for a
// fit (first fit over the free ranges in address order).
//
// Thread safety: none; the owner serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "strata/export.hpp"

namespace strata {

class STRATA_API extent_space {
 public:
  /// `align` is the unit of every range (a power of two); `limit` the most
  /// bytes the file may hold (0: no limit).
  extent_space(std::size_t align, std::uint64_t limit) : align_(align), limit_(limit) {}

  /// The offset of `bytes` (rounded up to the unit) of free space starting
  /// at a multiple of `start_align` (a multiple of the unit; 0: the unit),
  /// or nullopt when the limit is reached. Space skipped
  /// to align the start stays free for later takes.
  std::optional<std::uint64_t> take(std::uint64_t bytes, std::uint64_t start_align = 0);
  /// Returns [offset, offset + bytes) (as `take` rounded it).
  void give(std::uint64_t offset, std::uint64_t bytes);

  [[nodiscard]] std::uint64_t rounded(std::uint64_t bytes) const noexcept {
    return (bytes + align_ - 1) / align_ * align_;
  }
  /// Bytes handed out and not given back.
  [[nodiscard]] std::uint64_t used() const noexcept { return used_; }
  /// The end of the highest range ever handed out: the file's size.
  [[nodiscard]] std::uint64_t end() const noexcept { return end_; }

 private:
  // Adds [offset, offset + bytes) to the free ranges, merged with its
  // neighbours.
  void add_free(std::uint64_t offset, std::uint64_t bytes);

  std::size_t align_;
  std::uint64_t limit_;
  std::uint64_t used_ = 0;
  std::uint64_t end_ = 0;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> bytes, below end_
};

}  // namespace strata
