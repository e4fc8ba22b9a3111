// When the write-behind runs (write_behind.cpp), and the bounce chunk its
// parts go through: the write-behind's own state, apart from the buffers
// it writes.
//
// It runs only with a host capacity, an NVMe tier and nvme_write_behind
// on, while the host tier could not make `room` bytes (host_lookahead, at
// most the capacity) without a write, and, with an NVMe capacity, while
// the store keeps room for the write plus `room`.
//
// Thread safety: const after create(); the bounce chunk is used by the
// I/O thread alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "strata/error.hpp"
#include "strata/tier_options.hpp"

namespace strata {

class write_behind_budget {
 public:
  /// Off: no write-behind.
  write_behind_budget() = default;
  /// For the tiers `options` describe, over an NVMe store of `block`-byte
  /// logical blocks whose staging chunks are `chunk` bytes: off unless
  /// nvme_write_behind is on and there is a host capacity. Errors:
  /// out_of_memory (no host memory for the bounce chunk).
  static result<write_behind_budget> create(const tier_options& options, std::size_t block,
                                            std::size_t chunk);

  [[nodiscard]] bool on() const noexcept { return room_ != 0; }
  /// True when the host tier, `in_use` bytes of its capacity taken and
  /// `freeable` more it could free without a write (shadows, buffers with a
  /// kept extent), could not make the room: a write-behind should run.
  [[nodiscard]] bool host_short(std::uint64_t in_use, std::uint64_t freeable) const noexcept {
    return (in_use < host_capacity_ ? host_capacity_ - in_use : 0) + freeable < room_;
  }
  /// True when the NVMe store, `used` bytes taken, keeps room for a write
  /// of `span` bytes plus the room spills may need.
  [[nodiscard]] bool nvme_room(std::uint64_t used, std::uint64_t span) const noexcept {
    return nvme_capacity_ == 0 || used + span + room_ <= nvme_capacity_;
  }
  /// The bounce chunk (block-aligned, outside the host tier); empty when off.
  [[nodiscard]] std::span<unsigned char> bounce() const noexcept {
    return {bounce_.get(), bounce_bytes_};
  }

 private:
  std::uint64_t room_ = 0;           // host room kept makeable without a write; 0: off
  std::uint64_t host_capacity_ = 0;  // the host tier's
  std::uint64_t nvme_capacity_ = 0;  // the NVMe tier's, 0: until the disk is full
  std::unique_ptr<unsigned char, void (*)(void*)> bounce_{nullptr, std::free};
  std::size_t bounce_bytes_ = 0;
};

}  // namespace strata
