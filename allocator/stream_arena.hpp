// One stream's arena for one pool kind: a reserved virtual range into which
// physical pages are mapped on demand, the blocks carved from it, and the
// epochs that say when freed pages are idle.
//
// Epochs: the pages under a block freed on the arena's stream are stamped
// with the open epoch (no device call). `seal` records one event on the
// stream closing the open epoch; `poll` advances `completed` as those events
// finish. A page whose epoch is <= completed has no queued work left on it:
// it may be unmapped. Reuse at the same address needs no epoch: the stream's
// own order protects it.
//
// Invariants: `page_ids_[i]` is the page_table id of the page mapped at page
// i (page_table::none: nothing); every page overlapping an allocated,
// pending or shadow block is mapped.
//
// Thread safety: none; the allocator serializes calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "block_map.hpp"
#include "event_pool.hpp"
#include "strata/device.hpp"

namespace strata {

enum class pool_kind : std::uint8_t { small, large };

struct slab;

class stream_arena {
 public:
  /// Throws std::bad_alloc if a small arena's slab table cannot be reserved.
  stream_arena(stream_handle stream, pool_kind kind, std::uintptr_t base, std::size_t bytes,
               std::size_t granularity);
  stream_arena(const stream_arena&) = delete;
  stream_arena& operator=(const stream_arena&) = delete;
  stream_arena(stream_arena&&) = delete;
  stream_arena& operator=(stream_arena&&) = delete;
  ~stream_arena();

  [[nodiscard]] stream_handle stream() const noexcept { return stream_; }
  [[nodiscard]] pool_kind kind() const noexcept { return kind_; }
  [[nodiscard]] std::uintptr_t base() const noexcept { return blocks_.base(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return blocks_.size(); }
  [[nodiscard]] bool contains(std::uintptr_t p) const noexcept {
    return p - blocks_.base() < blocks_.size();
  }
  block_map& blocks() noexcept { return blocks_; }

  // --- pages ---------------------------------------------------------------
  [[nodiscard]] std::size_t page_of(std::uintptr_t p) const noexcept {
    return (p - blocks_.base()) >> page_shift_;
  }
  [[nodiscard]] std::uintptr_t page_addr(std::size_t i) const noexcept {
    return blocks_.base() + (i << page_shift_);
  }
  [[nodiscard]] std::size_t page_count() const noexcept { return page_ids_.size(); }
  /// The page_table id of the page mapped at page i, or page_table::none.
  [[nodiscard]] std::uint32_t page(std::size_t i) const noexcept { return page_ids_[i]; }
  [[nodiscard]] bool is_mapped(std::size_t i) const noexcept { return page_ids_[i] != unmapped; }
  /// Records that page `id` is mapped at page i (`unmapped`: nothing is).
  /// Called by page_table, which keeps the other side.
  void set_page(std::size_t i, std::uint32_t id) noexcept;
  static constexpr std::uint32_t unmapped = 0xffffffff;
  [[nodiscard]] std::size_t mapped_pages() const noexcept { return mapped_pages_; }
  /// The first mapped page in [from, to), or `to`. Cost: one step per 64 pages.
  [[nodiscard]] std::size_t next_mapped(std::size_t from, std::size_t to) const noexcept;
  /// The first unmapped page in [from, to), or `to`. Same cost.
  [[nodiscard]] std::size_t next_unmapped(std::size_t from, std::size_t to) const noexcept;
  /// How many pages in [from, to) are unmapped. Cost: one step per 64 pages.
  [[nodiscard]] std::size_t unmapped_pages(std::size_t from, std::size_t to) const noexcept;
  /// True when every page under [addr, addr+bytes) (bytes > 0) is mapped.
  [[nodiscard]] bool fully_mapped(std::uintptr_t addr, std::size_t bytes) const noexcept {
    const std::size_t last = page_of(addr + bytes - 1) + 1;
    return next_unmapped(page_of(addr), last) == last;
  }

  // --- slabs (small arenas) ----------------------------------------------
  // The slab table has one entry per slab unit (size_classes::slab_unit):
  // the slab covering it, or null. Readable without the allocator's mutex
  // (thread caches do); written under it. Its memory is mapped lazily, so
  // only the entries of units ever used cost memory.

  /// The slab holding address p of this arena, or null.
  [[nodiscard]] slab* slab_of(std::uintptr_t p) const noexcept {
    return slabs_[(p - blocks_.base()) >> slab_shift_].load(std::memory_order_acquire);
  }
  /// Points every unit of [addr, addr+bytes) at `s` (null to clear).
  void set_slab(std::uintptr_t addr, std::size_t bytes, slab* s) noexcept;
  /// The slab table itself, for thread caches that index it directly.
  [[nodiscard]] const std::atomic<slab*>* slab_table() const noexcept { return slabs_; }
  [[nodiscard]] unsigned slab_shift() const noexcept { return slab_shift_; }

  // --- epochs --------------------------------------------------------------
  /// The epoch a free made now belongs to.
  [[nodiscard]] std::uint64_t open_epoch() const noexcept { return open_; }
  /// Stamps the pages under [addr, addr+bytes), just freed, with the open
  /// epoch. Cost: one store per page.
  void mark_freed(std::uintptr_t addr, std::size_t bytes) noexcept;
  /// True when no queued work of the arena's stream can touch page i.
  [[nodiscard]] bool page_idle(std::size_t i) const noexcept {
    return page_epoch_[i] <= completed_;
  }
  /// The epoch of the last free that touched page i.
  [[nodiscard]] std::uint64_t page_epoch(std::size_t i) const noexcept { return page_epoch_[i]; }
  [[nodiscard]] bool idle(std::uint64_t epoch) const noexcept { return epoch <= completed_; }
  /// Frees stamped with the open epoch so far.
  [[nodiscard]] std::size_t open_frees() const noexcept { return open_frees_; }
  /// True while some free is not yet known to be idle.
  [[nodiscard]] bool has_busy_epochs() const noexcept {
    return open_frees_ > 0 || !sealed_.empty();
  }
  /// Records an event closing the open epoch (nothing when it holds no free).
  status seal(device& dev, event_pool& events);
  /// True when the last seal is at least `epoch_interval_s` old on the
  /// device's host clock (`now`).
  [[nodiscard]] bool seal_due(double now) const noexcept {
    return now - last_seal_s_ >= epoch_interval_s;
  }
  /// Advances `completed` past every sealed epoch whose event finished.
  /// Errors: the device's event query (`completed` as far as it got).
  status poll(device& dev, event_pool& events);
  /// poll(), unless an event of this arena was found unfinished less than
  /// `epoch_interval_s` ago: for callers that only hope to find pages
  /// idle sooner. Skipping is always safe (pages stay pending longer).
  status poll_if_due(device& dev, event_pool& events);

  /// Event calls cost about 2 us each inside a training step on an H100
  /// (bench/RESULTS.md, "On an H100"), where the GPU runs about 12 ms
  /// behind the host: epochs closed and queried at most once a
  /// millisecond lose little of what the events tell and cost a fraction
  /// of the calls.
  static constexpr double epoch_interval_s = 1e-3;
  /// Blocks until `epoch` is complete (sealing it first if it is open).
  status wait_idle(std::uint64_t epoch, device& dev, event_pool& events);
  /// Returns every pending event to the pool (allocator teardown).
  void drop_events(event_pool& events);

 private:
  struct sealed_epoch {
    event_handle event;
    std::uint64_t epoch;
  };

  stream_handle stream_;
  pool_kind kind_;
  unsigned page_shift_;  // log2 of the granularity (a power of two)
  block_map blocks_;
  std::vector<std::uint32_t> page_ids_;
  std::vector<std::uint64_t> mapped_bits_;
  std::vector<std::uint64_t> page_epoch_;
  unsigned slab_shift_;                  // log2 of the slab unit
  std::atomic<slab*>* slabs_ = nullptr;  // mmap'ed, zero until written
  std::size_t slab_table_bytes_ = 0;
  std::size_t mapped_pages_ = 0;
  std::uint64_t open_ = 1;
  std::uint64_t completed_ = 0;
  std::size_t open_frees_ = 0;  // frees stamped with the open epoch
  std::deque<sealed_epoch> sealed_;
  double last_seal_s_ = -epoch_interval_s;        // host clock of the last seal
  double last_unfinished_s_ = -epoch_interval_s;  // ... of the last query that said no
};

}  // namespace strata
