// The rounding rule and the size classes of small blocks.
//
// Rounding rule (every block is 512-byte aligned):
//   - a request of 1..512 bytes takes 512 bytes;
//   - requests up to the slab limit (min(small_size, 512 KiB)) take the
//     next size class: multiples of 512 up to 2 KiB, then four classes per
//     power of two (2.5, 3, 3.5, 4 KiB, 5, 6, 7, 8 KiB, ..., 448 KiB,
//     512 KiB), so a class wastes at most 20% of its size;
//   - every larger request is rounded up to a multiple of 512 bytes.
// Size classes are packed into slabs made of whole slab units (64 KiB, or
// the page if pages are smaller), so that several sparsely used classes
// share one page instead of holding a page each. A slab aims at four
// objects, at least one unit and at most one page; from there it takes the
// fewest units (at most 8 more) whose tail, the part no whole object fits
// in, is at most 1/16 of the slab; failing that, the unit count with the
// smallest tail.
//
// Thread safety: immutable after construction.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace strata {

inline constexpr std::size_t block_alignment = 512;

class size_classes {
 public:
  static constexpr std::size_t max_classes = 64;
  /// The slab unit for pages of `page_bytes`: 64 KiB, or the page if smaller.
  [[nodiscard]] static constexpr std::size_t slab_unit(std::size_t page_bytes) noexcept {
    return page_bytes < (std::size_t{64} << 10) ? page_bytes : std::size_t{64} << 10;
  }

  /// Slabs stop at 512 KiB: 1 MiB objects two to a page left half-empty
  /// pages after churn (bench/RESULTS.md); as blocks they pack tighter.
  static constexpr std::size_t max_slab_limit = std::size_t{512} << 10;

  /// Classes up to min(`slab_limit`, 512 KiB) bytes, in slabs of pages of
  /// `page_bytes` (a power of two).
  size_classes(std::size_t slab_limit, std::size_t page_bytes);

  /// Rounds a non-zero request per the rule above (large requests too).
  [[nodiscard]] static std::size_t round(std::size_t bytes) noexcept {
    return (bytes + block_alignment - 1) & ~(block_alignment - 1);
  }
  /// The largest request served from a slab.
  [[nodiscard]] std::size_t slab_limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// The class of a request of 1..slab_limit() bytes. Cost: a few
  /// arithmetic operations, no loop.
  [[nodiscard]] static std::uint32_t class_of(std::size_t bytes) noexcept {
    if (bytes <= 2048) return static_cast<std::uint32_t>((bytes - 1) / 512);
    // Four classes per power of two above 2 KiB: the power, then the quarter.
    const std::size_t base = std::bit_floor(bytes - 1);
    const int log2 = std::countr_zero(base);
    const auto quarter = static_cast<std::uint32_t>((bytes - 1 - base) >> (log2 - 2));
    return 4 + static_cast<std::uint32_t>(log2 - 11) * 4 + quarter;
  }
  [[nodiscard]] std::size_t class_size(std::uint32_t c) const noexcept { return sizes_[c]; }
  /// Bytes of one slab of class c (whole slab units).
  [[nodiscard]] std::size_t slab_bytes(std::uint32_t c) const noexcept { return slab_bytes_[c]; }

 private:
  std::array<std::size_t, max_classes> sizes_{};
  std::array<std::size_t, max_classes> slab_bytes_{};
  std::size_t count_ = 0;
  std::size_t limit_ = 0;
};

}  // namespace strata
