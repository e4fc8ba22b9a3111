// The blocks of one arena's address space: address-ordered first fit with
// split and coalesce.
//
// The address space [base, base+size) is tiled by blocks, each free,
// allocated (handed to a caller), pending (freed by the caller but waiting
// on events before reuse) or shadow (whole pages whose bytes are live at
// another mapping of theirs: see page_table). Free blocks never touch each
// other: a freed block merges with free neighbours at once, except across a
// fence. A fence is a permanent boundary: the start of a range backed by
// pages stitched in from elsewhere, which no block may share with another
// mapping of the same page (page_supply sets them).
//
// Each free block carries `mapped`: every page overlapping the block is
// mapped, so allocating from it needs no page work. A conservative flag:
// false may still mean all pages are mapped, never the reverse.
//
// Placement: the lowest-addressed free block large enough. It keeps live
// blocks packed toward the start of the range, which leaves fewer partly
// used pages than best fit on real training traces (bench/RESULTS.md).
// Free blocks are kept in 64 size buckets (floor(log2(size))), each ordered
// by address: every block in a bucket above the request's fits, so only the
// request's own bucket is scanned, and only below the best address found.
//
// Cost: allocate and release are O(log n) in the number of blocks; a search
// looks at the first block of each non-empty larger bucket (at most 64) plus
// the blocks of its own bucket below that address. Node memory comes from a
// pool owned by the map, so after warm-up no call reaches the system
// allocator.
//
// Thread safety: none; the owner serializes calls.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <set>
#include <utility>

namespace strata {

class thread_cache;

enum class block_state : std::uint8_t { free, allocated, pending, shadow };

struct block_info {
  std::size_t size = 0;
  std::size_t requested = 0;  // allocated/pending: the caller's size
  block_state state = block_state::free;
  bool mapped = false;  // free: see above; allocated/pending: always true
  // allocated: the thread cache whose large slot holds the block (parked or
  // lent), else null. Read and written under the owner's lock.
  thread_cache* holder = nullptr;
  // allocated (large arena): the thread cache of the thread that asked for
  // it; only that thread's free parks it (caching_allocator::park).
  thread_cache* maker = nullptr;
  bool fence = false;  // a fence at the block's start: it never merges with the block before

  /// Allocated or pending: a caller's block (or a slab), not free space or a shadow.
  [[nodiscard]] bool in_use() const noexcept {
    return state == block_state::allocated || state == block_state::pending;
  }
};

class block_map {
 public:
  using iterator = std::pmr::map<std::uintptr_t, block_info>::iterator;

  block_map(std::uintptr_t base, std::size_t size);
  block_map(const block_map&) = delete;
  block_map& operator=(const block_map&) = delete;
  block_map(block_map&&) = delete;
  block_map& operator=(block_map&&) = delete;
  ~block_map() = default;

  /// The lowest-addressed free block of at least `bytes`, or end().
  iterator first_fit(std::size_t bytes);

  /// Carves `bytes` from the start of free block `it`, marks it allocated
  /// with `requested` and returns it; the remainder stays free.
  iterator allocate(iterator it, std::size_t bytes, std::size_t requested);
  /// The free block holding all of [addr, addr+bytes), or end().
  iterator free_block_holding(std::uintptr_t addr, std::size_t bytes);
  /// Carves [addr, addr+bytes) from free block `it`, which holds it, marks
  /// it allocated with `requested` and returns it; what is left on either
  /// side stays free.
  iterator allocate_at(iterator it, std::uintptr_t addr, std::size_t bytes, std::size_t requested);

  /// The allocated or pending block starting at `addr`, or end().
  iterator find_in_use(std::uintptr_t addr);
  /// The block holding address `addr` (which must lie in the range).
  iterator find_containing(std::uintptr_t addr) { return std::prev(blocks_.upper_bound(addr)); }

  /// Puts a fence at the start of block `it`.
  void fence(iterator it);
  /// Puts a fence at `addr`, in free space or at a block's start (a free
  /// block is split there).
  void fence_at(std::uintptr_t addr);
  /// The fences, in address order.
  [[nodiscard]] const std::pmr::set<std::uintptr_t>& fences() const noexcept { return fences_; }
  /// Lifts the fence at `addr`, merging the free blocks on its two sides.
  void drop_fence(std::uintptr_t addr);
  /// The last fence at or before `addr`, or the start of the range.
  [[nodiscard]] std::uintptr_t prev_fence(std::uintptr_t addr) const;
  /// The first fence after `addr`, or the end of the range.
  [[nodiscard]] std::uintptr_t next_fence(std::uintptr_t addr) const;

  /// Shadows [addr, addr+bytes), which is free (one free block, or several
  /// split by fences): it is neither free nor in use until unshadow().
  void shadow(std::uintptr_t addr, std::size_t bytes);
  /// Frees [addr, addr+bytes), which shadow blocks cover, merging with free
  /// neighbours (its pages are mapped).
  void unshadow(std::uintptr_t addr, std::size_t bytes);

  /// Marks an allocated block pending (freed, waiting on events).
  static void set_pending(iterator it) { it->second.state = block_state::pending; }

  /// Frees an allocated or pending block, merging with free neighbours
  /// (mapped = AND). Returns the merged free block.
  iterator release(iterator it);

  /// Sets the `mapped` flag of free block `it`: false after pages were
  /// taken away, true when the caller checked every page is mapped.
  void set_mapped(iterator it, bool mapped);

  iterator begin() { return blocks_.begin(); }
  iterator end() { return blocks_.end(); }
  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Number of free blocks whose `mapped` flag is set.
  [[nodiscard]] std::size_t mapped_free_blocks() const noexcept { return mapped_free_; }

 private:
  void insert_free(iterator it);
  void erase_free(iterator it);

  std::uintptr_t base_;
  std::size_t size_;
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::map<std::uintptr_t, block_info> blocks_{&pool_};
  static constexpr unsigned buckets = 64;
  using bucket = std::pmr::map<std::uintptr_t, std::size_t>;  // address -> size
  static unsigned bucket_of(std::size_t bytes) noexcept;
  template <std::size_t... I>
  static std::array<bucket, buckets> make_buckets(std::pmr::memory_resource* r,
                                                  std::index_sequence<I...> /*unused*/) {
    return {{((void)I, bucket(r))...}};
  }

  // Free blocks by size bucket.
  std::array<bucket, buckets> free_{make_buckets(&pool_, std::make_index_sequence<buckets>{})};
  std::uint64_t nonempty_ = 0;  // bit b: bucket b holds a block
  std::size_t mapped_free_ = 0;
  std::pmr::set<std::uintptr_t> fences_{&pool_};
};

}  // namespace strata
