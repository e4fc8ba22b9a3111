// The blocks of one arena's address space: best fit with split and coalesce.
//
// The address space [base, base+size) is tiled by blocks, each free,
// allocated (handed to a caller) or pending (freed by the caller but waiting
// on events before reuse). Free blocks never touch each other: a freed block
// merges with free neighbours at once.
//
// Each free block carries `mapped`: every page overlapping the block is
// mapped, so allocating from it needs no page work. A conservative flag:
// false may still mean all pages are mapped, never the reverse.
//
// Cost: allocate and release are O(log n) in the number of blocks; node
// memory comes from a pool owned by the map, so after warm-up they make no
// call to the system allocator.
//
// Thread safety: none; the owner serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <set>
#include <utility>

namespace strata {

class thread_cache;

enum class block_state : std::uint8_t { free, allocated, pending };

struct block_info {
  std::size_t size = 0;
  std::size_t requested = 0;  // allocated/pending: the caller's size
  block_state state = block_state::free;
  bool mapped = false;  // free: see above; allocated/pending: always true
  // allocated: the thread cache whose large slot holds the block (parked or
  // lent), else null. Read and written under the owner's lock.
  thread_cache* holder = nullptr;
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

  /// The smallest free block of at least `bytes`, or end().
  iterator best_fit(std::size_t bytes);

  /// Carves `bytes` from the start of free block `it`, marks it allocated
  /// with `requested` and returns it; the remainder stays free.
  iterator allocate(iterator it, std::size_t bytes, std::size_t requested);

  /// The allocated or pending block starting at `addr`, or end().
  iterator find_in_use(std::uintptr_t addr);

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
  std::pmr::set<std::pair<std::size_t, std::uintptr_t>> free_by_size_{&pool_};
  std::size_t mapped_free_ = 0;
};

}  // namespace strata
