// Models of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator
// .cpp, PyTorch 2.11), to say what a planned step (strata plan) or a
// replayed trace (strata replay) reserves under it: a request is rounded
// up to 512 bytes; requests up to 1 MiB come from the small pool, the rest
// from the large one; the smallest free block that fits is taken (best
// fit) and split when what is left is at least 512 bytes (small) or more
// than 1 MiB (large); a freed block merges with its free neighbours in its
// segment.
//
//   native (the default): a request no free block fits gets a segment of
//   its own from cudaMalloc: 2 MiB for a small one, 20 MiB for one under
//   10 MiB, else its size rounded up to 2 MiB; segments are never merged.
//   expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): one
//   segment per pool that grows at its end in pages (2 MiB small, 20 MiB
//   large), joining a free block at its end.
//
// Neither releases cached memory (PyTorch does so only when cudaMalloc
// fails, or on empty_cache): the peak reserved is what a step needs with
// room to spare. Replayed over the H100 snapshots' own requests the models
// give 15.77 and 40.96 GiB (native; PyTorch reported 15.77 and 40.96) and
// 14.70 and 40.07 GiB (expandable; 14.68 and 40.07).
//
// Thread safety: a model is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

namespace strata {

class pytorch_allocator_model {
 public:
  enum class mode : std::uint8_t { native, expandable };
  explicit pytorch_allocator_model(mode m) : mode_(m) {}

  /// Allocates `bytes` (more than 0); returns the block's handle.
  std::uint32_t allocate(std::uint64_t bytes);
  /// Frees a handle allocate() returned and has not been freed.
  void free(std::uint32_t handle);
  /// Bytes reserved from the device now, and at their peak.
  [[nodiscard]] std::uint64_t reserved() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_reserved() const noexcept { return peak_; }

  /// One time the model took memory from the device. native: one
  /// cudaMalloc of `bytes` (`page` is 0). expandable: `bytes` of new pages
  /// of `page` bytes at a segment's end, as PyTorch maps them (each page
  /// one cuMemCreate and one cuMemMap, then one cuMemSetAccess over them).
  struct growth {
    std::uint64_t bytes;
    std::uint64_t page;
  };
  /// Every growth since the model was made or forget_growths() was called,
  /// in order.
  [[nodiscard]] const std::vector<growth>& growths() const noexcept { return growths_; }
  void forget_growths() noexcept { growths_.clear(); }

 private:
  struct block {
    std::uint32_t segment;
    std::uint64_t offset;
    std::uint64_t size;
    bool free;
    bool small;
    std::uint32_t prev;  // neighbours in the segment (none: absent)
    std::uint32_t next;
  };
  using free_key = std::tuple<std::uint64_t, std::uint32_t, std::uint64_t, std::uint32_t>;

  std::uint32_t new_block(const block& b);
  void insert_free(std::uint32_t id);
  void erase_free(std::uint32_t id);
  // A block of at least `size` in the pool, made by growing the device's
  // share (a new segment, or the pool's expandable segment).
  std::uint32_t grow(std::uint64_t size, bool small);

  mode mode_;
  std::vector<block> blocks_;
  std::vector<std::uint32_t> spare_;  // ids of merged-away blocks, for reuse
  std::set<free_key> free_[2];        // by pool (0 large, 1 small): size, segment, offset, id
  std::uint32_t segments_ = 0;
  std::uint32_t tail_[2] = {UINT32_MAX, UINT32_MAX};  // expandable: each pool's last block
  std::uint64_t mapped_[2] = {0, 0};                  // expandable: each pool's segment size
  std::uint64_t reserved_ = 0;
  std::uint64_t peak_ = 0;
  std::vector<growth> growths_;
};

}  // namespace strata
