// The pinned host tier: pinned host memory from the device (cuMemHostAlloc
// on cuda, plain host memory on sim) in two ways, by size:
//
// - Buffers below `host_large` (default 256 KiB) come from size-class runs
//   carved out of chunks of `host_chunk` bytes (pinned_run_heap.hpp), so
//   they are not rounded to fixed buffer pools or powers of two. The
//   chunks go back to the device when the pool is destroyed; the runs'
//   descriptions live in ordinary memory: pinned memory is only for
//   buffers.
// - Larger buffers get one device allocation each (pinned_block_cache.hpp).
//   A freed one is kept for reuse, so that a tier moving the same buffers
//   step after step makes no device call once its peak has been reached.
//   A new one first sends the oldest kept buffers back while the pinned
//   bytes would pass the peak of bytes in use plus `host_kept` of it (or
//   the capacity). Carving them from shared chunks fragmented: 13-22%
//   waste on the bundled traces, against at most 6% now.
//
// Invariant: pinned bytes <= max((1 + host_kept) x peak in use, what the
// live buffers and the chunks pin), and <= `capacity` when it is set. Kept
// buffers stay until a new buffer needs their room (or the pool goes): a
// job whose host memory peaks once keeps that peak pinned, as PyTorch's
// pinned-memory cache does.
//
// `capacity` caps the pinned bytes of both: past it an allocation is
// out_of_memory (the residency manager then goes to NVMe); kept buffers are
// released first to make room.
//
// Waste = pinned bytes held / bytes in use (class sizes; whole 4 KiB pages
// for large buffers), in `stats()`.
//
// Nothing here needs a library loaded at run time or thread-local storage:
// the pool works in any process, however late Strata is loaded into it.
//
// Thread safety: every member may be called concurrently (one mutex).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "pinned_block_cache.hpp"
#include "pinned_run_heap.hpp"
#include "strata/device.hpp"
#include "strata/tier_options.hpp"

namespace strata {

class pinned_host_pool {
 public:
  /// A pool over `dev`'s pinned host memory (`dev` must outlive it), sized
  /// by the host_* options, which must be in their table ranges
  /// (check_tier_options). Allocates nothing until asked.
  static result<std::unique_ptr<pinned_host_pool>> create(device& dev, const tier_options& options);
  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;
  pinned_host_pool(pinned_host_pool&&) = delete;
  pinned_host_pool& operator=(pinned_host_pool&&) = delete;
  /// Returns the chunks and the large buffers (live ones too) to the device.
  ~pinned_host_pool();

  /// `bytes` (> 0) of pinned host memory. Errors: out_of_memory at the
  /// capacity or when the device has no more pinned memory.
  result<void*> allocate(std::size_t bytes);
  /// Frees what `allocate` returned. Null, and a pointer that is not a
  /// live buffer's start, change nothing (the residency manager, the one
  /// caller, frees only its own buffers).
  void free(void* ptr);

  struct counters {
    std::uint64_t pinned_bytes = 0;  ///< chunks and large buffers held
    std::uint64_t in_use_bytes = 0;  ///< usable sizes of live allocations
    std::uint64_t peak_pinned_bytes = 0;
    std::uint64_t peak_in_use_bytes = 0;
    std::uint64_t chunks = 0;
    std::uint64_t kept_bytes = 0;      ///< freed large buffers kept for reuse
    std::uint64_t metadata_bytes = 0;  ///< the runs' descriptions, in pageable memory
    std::uint64_t failed = 0;          ///< allocations refused
    /// Device calls: pinned allocations made (chunks and large buffers),
    /// and large buffers given back.
    std::uint64_t device_allocations = 0;
    std::uint64_t device_releases = 0;
    /// peak pinned / peak in use - 1 (0 when nothing was used).
    [[nodiscard]] double peak_waste() const noexcept {
      return peak_in_use_bytes == 0
                 ? 0.0
                 : static_cast<double>(peak_pinned_bytes) / static_cast<double>(peak_in_use_bytes) -
                       1.0;
    }
  };
  [[nodiscard]] counters stats();

 private:
  pinned_host_pool(device& dev, const tier_options& options)
      : options_(options), small_(dev, options.host_chunk), large_(dev) {}
  result<void*> allocate_large(std::size_t bytes);
  // Pinned bytes the capacity still allows (needs mu_).
  [[nodiscard]] std::uint64_t room() const noexcept;
  // Pinned bytes a new allocation of `need` may add before kept buffers go
  // back: up to (1 + host_kept) x the peak in use, counting `need` as in
  // use (needs mu_).
  [[nodiscard]] std::uint64_t headroom(std::uint64_t need) const noexcept;
  // Records pinned bytes after a change (needs mu_).
  void note_pinned() noexcept;
  void note_in_use(std::uint64_t added) noexcept;
  status out_of_memory(std::size_t bytes);

  tier_options options_;
  std::mutex mu_;  // everything below
  pinned_run_heap small_;
  pinned_block_cache large_;
  std::uint64_t in_use_ = 0;
  std::uint64_t peak_in_use_ = 0;
  std::uint64_t peak_pinned_ = 0;
  std::atomic<std::uint64_t> failed_{0};
};

}  // namespace strata
