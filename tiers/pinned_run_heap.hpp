// Small pinned host buffers: size classes served from runs carved out of
// pinned chunks (Strata's own, in place of a general-purpose malloc, which
// for a library loaded into a running process costs static TLS it cannot
// get, and whose internal locking a ThreadSanitizer build cannot see).
//
// Classes: multiples of 16 bytes up to 128, then four per doubling (160,
// 192, 224, 256, 320, ...): a buffer wastes at most a fifth of its class,
// like jemalloc's. A run holds objects of one class, packed from a 4 KiB
// aligned base (at least 64 KiB of them, or one object); free objects are
// chained through their own first bytes (pinned memory holds no other
// metadata: runs, with a bit per object saying it is live, are described
// on the ordinary heap, so a repeated or foreign free is recognised). Runs come from the
// chunks' free space by first fit; a run whose objects are all free goes
// back to it (one empty run per class is kept, so a buffer freed and asked
// for again does not carve every time), merging with free neighbours of the
// same chunk. Chunks come from the device `chunk_bytes` at a time (more for
// a run that needs more) and go back when the heap is destroyed.
//
// Cost: allocate and free are a map lookup and a few list operations; the
// device is called only for a new chunk.
//
// Thread safety: none; the pinned host pool calls it under its mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "strata/device.hpp"

namespace strata {

class pinned_run_heap {
 public:
  /// Buffers of up to max_bytes, from chunks of `chunk_bytes` of `dev`'s
  /// pinned host memory (`dev` must outlive the heap).
  pinned_run_heap(device& dev, std::size_t chunk_bytes) : dev_(dev), chunk_bytes_(chunk_bytes) {}
  pinned_run_heap(const pinned_run_heap&) = delete;
  pinned_run_heap& operator=(const pinned_run_heap&) = delete;
  pinned_run_heap(pinned_run_heap&&) = delete;
  pinned_run_heap& operator=(pinned_run_heap&&) = delete;
  /// Returns every chunk to the device (live buffers included).
  ~pinned_run_heap();

  static constexpr std::size_t max_bytes = std::size_t{1} << 30;
  /// The class size a request of `bytes` (1 .. max_bytes) gets.
  [[nodiscard]] static std::size_t class_size(std::size_t bytes) noexcept;

  /// A buffer of 1 .. max_bytes bytes; a new chunk only if it adds at most
  /// `room` pinned bytes. Null when nothing fits in `room` or the device has
  /// no more pinned memory. The buffer's usable size is class_size(bytes).
  /// Throws std::bad_alloc when the ordinary heap (the runs' descriptions)
  /// is out; nothing pinned is then lost.
  void* allocate(std::size_t bytes, std::uint64_t room);
  /// The class size of live buffer `p`, 0 if `p` is not a live buffer of
  /// this heap (not in a run, not at an object's start, or freed).
  [[nodiscard]] std::size_t usable_size(const void* p) const;
  /// Frees live buffer `p` (usable_size(p) != 0).
  void free(void* p);

  /// Pinned bytes of the chunks.
  [[nodiscard]] std::uint64_t pinned() const noexcept { return chunk_bytes_held_; }
  [[nodiscard]] std::size_t chunks() const noexcept { return chunks_.size(); }
  /// Ordinary heap bytes describing the runs (an estimate).
  [[nodiscard]] std::uint64_t metadata_bytes() const noexcept;

 private:
  struct run {
    std::uintptr_t base = 0;
    std::size_t object = 0;  // class size
    std::uint32_t cls = 0;
    std::uint32_t capacity = 0;  // objects
    std::uint32_t live = 0;
    std::uint32_t fresh = 0;  // objects below this index were handed out at least once
    void* free_list = nullptr;
    std::vector<std::uint64_t> handed;  // bit i: object i is live
    run* prev = nullptr;                // in its class's list of runs with a free object
    run* next = nullptr;
    bool listed = false;
    [[nodiscard]] std::size_t bytes() const noexcept { return object * capacity; }
  };
  static constexpr std::size_t max_classes = 8 + 4 * 24;
  static constexpr std::size_t run_target = std::size_t{64} << 10;
  static constexpr std::size_t run_alignment = 4096;

  [[nodiscard]] static std::uint32_t class_of(std::size_t bytes) noexcept;
  [[nodiscard]] static std::size_t size_of_class(std::uint32_t cls) noexcept;
  run* new_run(std::uint32_t cls, std::uint64_t room);
  void drop_run(run& r);
  void link(run& r);
  void unlink(run& r);
  // First fit of `bytes` at run_alignment in the chunks' free space, a new
  // chunk if none fits and `room` allows it; 0 when short.
  std::uintptr_t carve(std::size_t bytes, std::uint64_t room);
  // Gives [addr, addr+bytes) back to the free space of its chunk.
  void uncarve(std::uintptr_t addr, std::size_t bytes);

  device& dev_;
  std::size_t chunk_bytes_;
  std::map<std::uintptr_t, std::size_t> chunks_;         // base -> bytes
  std::map<std::uintptr_t, std::size_t> space_;          // free chunk space: start -> bytes
  std::map<std::uintptr_t, std::unique_ptr<run>> runs_;  // by base
  std::array<run*, max_classes> partial_{};              // runs with a free object
  std::array<std::uint32_t, max_classes> empty_{};       // empty runs kept per class
  std::uint64_t chunk_bytes_held_ = 0;
};

}  // namespace strata
