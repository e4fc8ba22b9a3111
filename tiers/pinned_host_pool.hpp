// The pinned host tier: pinned host memory from the device (cuMemHostAlloc
// on cuda, plain host memory on sim) in two ways, by size:
//
// - Buffers below `large_bytes` (default 256 KiB) come from a dedicated
//   jemalloc arena through custom extent hooks, so they are served from
//   jemalloc's size classes instead of fixed buffer pools or power-of-two
//   rounding. The hooks carve extents from chunks of `chunk_bytes` taken
//   from the device (first fit over the chunk space not yet handed to
//   jemalloc, at jemalloc's alignment); jemalloc keeps every extent it gets
//   (dalloc, purge and decommit decline: a chunk is never given back
//   piecemeal) and merges only extents of the same chunk. Chunks go back to
//   the device when the pool is destroyed. jemalloc's own metadata (asked
//   of the hooks in 2 MiB-aligned blocks, which no buffer extent is) comes
//   from ordinary anonymous memory: pinned memory is only for buffers.
// - Larger buffers get one device allocation each (pinned_block_cache.hpp):
//   a freed one is kept for reuse while the kept bytes stay under
//   `kept_fraction` of the bytes in use (or one chunk, whichever is more),
//   and goes back to the device beyond that. Carving them from shared chunks
//   fragmented: 13-22% waste on the bundled traces, against at most 6% now.
//
// `capacity` caps the pinned bytes of both: past it an allocation is
// out_of_memory (the residency manager then goes to NVMe); kept buffers are
// released first to make room.
//
// Waste = pinned bytes held / bytes in use (jemalloc's usable sizes; whole
// 4 KiB pages for large buffers), in `stats()`.
//
// Thread safety: every member may be called concurrently (jemalloc's arena
// is thread-safe; allocations bypass the thread caches; the hooks and the
// large buffers take the pool's mutex).
#pragma once

#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "jemalloc_library.hpp"
#include "pinned_block_cache.hpp"
#include "strata/allocator_options.hpp"
#include "strata/device.hpp"

namespace strata {

class pinned_host_pool {
 public:
  /// A pool over `dev`'s pinned host memory (`dev` must outlive it), sized
  /// by the host_* options, which must be in their table ranges
  /// (check_allocator_options). Errors: not_supported when jemalloc cannot
  /// load (see jemalloc_library.hpp).
  static result<std::unique_ptr<pinned_host_pool>> create(device& dev,
                                                          const offload_options& options);
  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;
  pinned_host_pool(pinned_host_pool&&) = delete;
  pinned_host_pool& operator=(pinned_host_pool&&) = delete;
  /// Destroys the arena (every allocation with it) and returns the chunks
  /// and the large buffers.
  ~pinned_host_pool();

  /// `bytes` (> 0) of pinned host memory. Errors: out_of_memory at the
  /// capacity or when the device has no more pinned memory.
  result<void*> allocate(std::size_t bytes);
  /// Frees what `allocate` returned. Null is a no-op.
  void free(void* ptr);

  struct counters {
    std::uint64_t pinned_bytes = 0;  ///< chunks and large buffers held
    std::uint64_t in_use_bytes = 0;  ///< usable sizes of live allocations
    std::uint64_t peak_pinned_bytes = 0;
    std::uint64_t peak_in_use_bytes = 0;
    std::uint64_t chunks = 0;
    std::uint64_t kept_bytes = 0;      ///< freed large buffers kept for reuse
    std::uint64_t metadata_bytes = 0;  ///< jemalloc's metadata, in pageable memory
    std::uint64_t failed = 0;          ///< allocations refused
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

  pinned_host_pool(device& dev, offload_options options, const jemalloc_library& je);
  void* carve(std::size_t size, std::size_t alignment);
  // jemalloc's metadata blocks (alignment >= metadata_alignment), mmap'ed.
  void* metadata(std::size_t size, std::size_t alignment);
  // jemalloc asks for metadata (base blocks) at huge-page alignment, for
  // buffer extents at page alignment.
  static constexpr std::size_t metadata_alignment = std::size_t{2} << 20;
  result<void*> allocate_large(std::size_t bytes);
  // Pinned bytes the capacity still allows (needs mu_).
  [[nodiscard]] std::uint64_t room() const noexcept;
  // Records pinned bytes after a change (needs mu_).
  void note_pinned() noexcept;
  void note_in_use(std::uint64_t added) noexcept;
  status out_of_memory(std::size_t bytes);
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
  offload_options options_;
  const jemalloc_library& je_;
  hooked hooked_{};
  unsigned arena_ = 0;
  int flags_ = 0;                                 // MALLOCX_ARENA | MALLOCX_TCACHE_NONE
  std::mutex mu_;                                 // chunks, their space, large_
  std::map<std::uintptr_t, std::size_t> chunks_;  // base -> bytes
  std::map<std::uintptr_t, std::size_t> unused_;  // chunk space never handed out
  std::uint64_t chunk_bytes_ = 0;                 // bytes of chunks_
  pinned_block_cache large_;
  std::vector<std::pair<void*, std::size_t>> metadata_;  // mmap'ed blocks
  std::uint64_t metadata_bytes_ = 0;
  std::atomic<std::uint64_t> in_use_{0};
  std::atomic<std::uint64_t> peak_in_use_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::uint64_t peak_pinned_ = 0;
};

}  // namespace strata
