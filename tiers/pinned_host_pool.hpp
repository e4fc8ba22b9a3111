// The pinned host tier: pinned host memory taken from the device in large
// chunks (cuMemHostAlloc on cuda, plain host memory on sim) and handed to a
// dedicated jemalloc arena through custom extent hooks, so buffers spilled
// from the GPU are served from jemalloc's size classes instead of fixed
// buffer pools or power-of-two rounding.
//
// The hooks carve extents from the chunks (first fit over the space of the
// chunks not yet handed to jemalloc, at jemalloc's alignment); jemalloc keeps every extent it gets
// (dalloc declines, purge and decommit decline: pinned memory is never given back piecemeal) and
// merges only extents of the same chunk. A chunk goes back to the device
// when the pool is destroyed. `capacity` caps the pinned bytes: past it an
// allocation is out_of_memory (the residency manager then goes to NVMe).
//
// Waste = pinned bytes held / bytes in use (jemalloc's usable sizes), in
// `stats()`.
//
// Thread safety: every member may be called concurrently (jemalloc's arena
// is thread-safe; allocations bypass the thread caches; the hooks take the
// pool's mutex).
#pragma once

#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "jemalloc_library.hpp"
#include "strata/device.hpp"

namespace strata {

struct pinned_pool_options {
  std::size_t chunk_bytes = 32ULL << 20;  ///< pinned memory asked of the device at a time
  std::uint64_t capacity = 0;             ///< most pinned bytes; 0: no limit
};

class pinned_host_pool {
 public:
  /// A pool over `dev`'s pinned host memory (`dev` must outlive it).
  /// Errors: not_supported when jemalloc cannot load (see
  /// jemalloc_library.hpp), invalid_argument for a zero chunk size.
  static result<std::unique_ptr<pinned_host_pool>> create(device& dev,
                                                          const pinned_pool_options& options);
  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;
  pinned_host_pool(pinned_host_pool&&) = delete;
  pinned_host_pool& operator=(pinned_host_pool&&) = delete;
  /// Destroys the arena (every allocation with it) and returns the chunks.
  ~pinned_host_pool();

  /// `bytes` (> 0) of pinned host memory. Errors: out_of_memory at the
  /// capacity or when the device has no more pinned memory.
  result<void*> allocate(std::size_t bytes);
  /// Frees what `allocate` returned. Null is a no-op.
  void free(void* ptr);

  struct counters {
    std::uint64_t pinned_bytes = 0;  ///< chunks held
    std::uint64_t in_use_bytes = 0;  ///< usable sizes of live allocations
    std::uint64_t peak_pinned_bytes = 0;
    std::uint64_t peak_in_use_bytes = 0;
    std::uint64_t chunks = 0;
    std::uint64_t failed = 0;  ///< allocations refused
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
  // The hooks jemalloc calls; `hooks` must stay the first member so that a
  // hooks pointer is a pool pointer.
  struct hooked {
    extent_hooks_t hooks;
    pinned_host_pool* pool;
  };

  pinned_host_pool(device& dev, const pinned_pool_options& options, const jemalloc_library& je);
  void* carve(std::size_t size, std::size_t alignment);
  [[nodiscard]] bool same_chunk(const void* a, const void* b);

  static void* hook_alloc(extent_hooks_t* h, void* new_addr, std::size_t size,
                          std::size_t alignment, bool* zero, bool* commit, unsigned arena);
  static bool hook_dalloc(extent_hooks_t* h, void* addr, std::size_t size, bool committed,
                          unsigned arena);
  static void hook_destroy(extent_hooks_t* h, void* addr, std::size_t size, bool committed,
                           unsigned arena);
  static bool hook_commit(extent_hooks_t* h, void* addr, std::size_t size, std::size_t offset,
                          std::size_t length, unsigned arena);
  static bool hook_decline(extent_hooks_t* h, void* addr, std::size_t size, std::size_t offset,
                           std::size_t length, unsigned arena);
  static bool hook_split(extent_hooks_t* h, void* addr, std::size_t size, std::size_t a,
                         std::size_t b, bool committed, unsigned arena);
  static bool hook_merge(extent_hooks_t* h, void* a, std::size_t size_a, void* b,
                         std::size_t size_b, bool committed, unsigned arena);

  device& dev_;
  pinned_pool_options options_;
  const jemalloc_library& je_;
  hooked hooked_{};
  unsigned arena_ = 0;
  int flags_ = 0;                                 // MALLOCX_ARENA | MALLOCX_TCACHE_NONE
  std::mutex mu_;                                 // chunks and the bump pointer
  std::map<std::uintptr_t, std::size_t> chunks_;  // base -> bytes
  std::map<std::uintptr_t, std::size_t> unused_;  // chunk space never handed out
  std::atomic<std::uint64_t> in_use_{0};
  std::atomic<std::uint64_t> peak_in_use_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::uint64_t pinned_ = 0;
  std::uint64_t peak_pinned_ = 0;
};

}  // namespace strata
