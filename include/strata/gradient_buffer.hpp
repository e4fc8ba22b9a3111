// A contiguous gradient buffer (docs/gradients.md): one device allocation
// holding the gradients of a list of parameters, each at an aligned offset,
// in a given order (by default the reverse of the parameters' order: the
// order a backward pass produces them, so that consecutive gradients form
// the buckets that are reduced together).
//
// Backing: one physical allocation (one page run of the device, mapped
// once), not a block of the caching allocator: NCCL's buffer registration
// (ncclCommRegister) refuses address ranges backed by more than one physical
// allocation (NCCL #1820), which is what the allocator's stitched large
// blocks are. The buffer takes its pages from the device directly, so the
// allocator's statistics do not count it; `reserved_bytes()` does.
//
// Thread safety: the accessors may be called concurrently; `zero` may be
// called from any thread (it only queues work).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/kernels.hpp"

namespace strata {

/// One parameter's gradient: `count` elements of `type`.
struct gradient_param {
  std::size_t count = 0;
  dtype type = dtype::f32;
};

class STRATA_API gradient_buffer {
 public:
  /// Lays out `params` in `order` (a permutation of their indices; empty:
  /// the reverse of their order), each gradient starting at a multiple of
  /// `alignment` bytes (a power of two, at least 16), and allocates the
  /// buffer on `dev`. The contents start undefined: `zero` them. Errors:
  /// invalid_argument (no parameters, a zero count, an unknown dtype, an
  /// order that is not a permutation, a bad alignment, a size that
  /// overflows), out_of_memory (the device has no room; nothing is held).
  static result<std::unique_ptr<gradient_buffer>> create(device& dev,
                                                         std::span<const gradient_param> params,
                                                         std::span<const std::size_t> order = {},
                                                         std::size_t alignment = 256);
  gradient_buffer(const gradient_buffer&) = delete;
  gradient_buffer& operator=(const gradient_buffer&) = delete;
  gradient_buffer(gradient_buffer&&) = delete;
  gradient_buffer& operator=(gradient_buffer&&) = delete;
  /// Returns the memory to the device. No queued work may still use it.
  ~gradient_buffer();

  /// The start of the buffer and its used length in bytes (the last
  /// gradient's end).
  [[nodiscard]] void* data() const noexcept { return reinterpret_cast<void*>(base_); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Device memory held, in bytes (bytes() rounded up to the granularity).
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::size_t params() const noexcept { return params_.size(); }
  /// The layout order: order()[k] is the parameter at the k-th position.
  [[nodiscard]] std::span<const std::size_t> order() const noexcept { return order_; }

  /// Parameter `p`'s gradient: its view into the buffer, offset and size in
  /// bytes, element count and type. `p` must be < params() (checked: an
  /// out-of-range `p` gives nullptr / 0).
  [[nodiscard]] void* view(std::size_t p) const noexcept;
  [[nodiscard]] std::size_t offset(std::size_t p) const noexcept;
  [[nodiscard]] std::size_t bytes_of(std::size_t p) const noexcept;
  [[nodiscard]] gradient_param param(std::size_t p) const noexcept;

  /// Sets every byte of the buffer to 0 in `stream` order. Errors: the
  /// device's.
  status zero(stream_handle stream);

  [[nodiscard]] device& dev() const noexcept { return dev_; }

 private:
  gradient_buffer(device& dev, std::vector<gradient_param> params, std::vector<std::size_t> order,
                  std::vector<std::size_t> offsets, std::size_t bytes);
  device& dev_;
  std::vector<gradient_param> params_;
  std::vector<std::size_t> order_;
  std::vector<std::size_t> offsets_;  // by parameter index
  std::size_t bytes_ = 0;
  std::size_t reserved_ = 0;
  std::uintptr_t base_ = 0;
  page_run pages_{};
};

}  // namespace strata
