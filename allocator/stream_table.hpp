// The streams the allocator has seen, each with its two arenas and its
// slab lists; and the lookup from an address to the arena that holds it.
//
// Invariants: `arenas()[k]` is owned by `owner(k)`; each stream has exactly
// its small and its large arena in `arenas()`, in the order they were made;
// a stream_state lives (at a stable address) until the table is destroyed.
// Lookups remember the last stream and arena hit: a repeat costs one
// compare (fast path), a miss a hash lookup or a scan of the arenas.
//
// Thread safety: none; the allocator's mutex serializes calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "event_pool.hpp"
#include "size_classes.hpp"
#include "slab.hpp"
#include "step_replay.hpp"
#include "strata/device.hpp"
#include "stream_arena.hpp"

namespace strata {

// Everything that belongs to one stream.
struct stream_state {
  struct slab_list {
    slab* head = nullptr;
  };
  stream_handle stream;
  std::unique_ptr<stream_arena> small;
  std::unique_ptr<stream_arena> large;
  step_replay replay;  // the large arena's placements, to repeat next step

  // Every slab of the small arena, newest first: they are deleted from
  // here, and full ones are reachable from nowhere else in host memory.
  slab* slabs = nullptr;
  std::array<slab_list, size_classes::max_classes> partial{};  // slabs with a free object
  std::array<std::uint32_t, size_classes::max_classes> empty_slabs{};
};

class stream_table {
 public:
  // A small arena reserves `small_bytes` of address space on `dev`, a
  // large one `large_bytes`, mapped in pages of `granularity` bytes; where
  // the device refuses that much (a host or GPU with less address space,
  // such as a ThreadSanitizer process), half as much, and so on down to
  // `least_bytes` (a multiple of `granularity`). Arenas' epoch events come
  // from `events`. Both must outlive the table.
  stream_table(device& dev, event_pool& events, std::size_t small_bytes, std::size_t large_bytes,
               std::size_t least_bytes, std::size_t granularity)
      : dev_(dev),
        events_(events),
        small_bytes_(small_bytes),
        large_bytes_(large_bytes),
        least_bytes_(least_bytes),
        granularity_(granularity) {}
  stream_table(const stream_table&) = delete;
  stream_table& operator=(const stream_table&) = delete;
  stream_table(stream_table&&) = delete;
  stream_table& operator=(stream_table&&) = delete;
  // Deletes the slabs, gives back the arenas' events and reservations (the
  // page supply has unmapped every page). The caller has synchronized the
  // device.
  ~stream_table();

  // The state of `native` (a native stream handle), made on first use: the
  // stream wrapped and its two arenas reserved. `made` is set when it is new.
  // Errors: the device's (stream, reservation: the last refusal);
  // out_of_memory when the host cannot hold the arenas' tables. Nothing is
  // kept on failure.
  result<stream_state*> get(void* native, bool& made);
  // The state of a stream already made, or null.
  [[nodiscard]] stream_state* find(void* native) const;

  // The index of the arena whose reserved range holds `p`, or
  // arenas().size(). Fast path: the arena of the last hit, one compare.
  std::size_t arena_of(std::uintptr_t p);
  [[nodiscard]] const std::vector<stream_arena*>& arenas() const noexcept { return arenas_; }
  [[nodiscard]] stream_state& owner(std::size_t k) const noexcept { return *owners_[k]; }
  // Calls `f(stream_state&)` for every stream.
  template <class F>
  void for_each(F&& f) {
    for (auto& [native, st] : streams_) f(*st);
  }

 private:
  device& dev_;
  event_pool& events_;
  std::size_t small_bytes_;
  std::size_t large_bytes_;
  std::size_t least_bytes_;
  std::size_t granularity_;
  std::unordered_map<void*, std::unique_ptr<stream_state>> streams_;
  std::vector<stream_arena*> arenas_;
  std::vector<stream_state*> owners_;  // owners_[k] owns arenas_[k]
  void* last_native_ = nullptr;
  stream_state* last_state_ = nullptr;
  std::size_t last_arena_ = 0;
};

}  // namespace strata
