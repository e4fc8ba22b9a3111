#include "stream_table.hpp"

#include <new>

namespace strata {

stream_table::~stream_table() {
  for (auto& [native, st] : streams_) {
    for (stream_arena* a : {st->small.get(), st->large.get()}) {
      for (std::size_t i = a->next_mapped(0, a->page_count()); i < a->page_count();
           i = a->next_mapped(i + 1, a->page_count())) {
        const page_run run = a->page(i);
        (void)dev_.unmap(a->page_addr(i), granularity_);
        (void)dev_.release_pages(run);
      }
      // In a small arena every block in use is a slab.
      for (auto it = a->blocks().begin(); a->kind() == pool_kind::small && it != a->blocks().end();
           ++it) {
        if (it->second.state != block_state::free) {
          delete a->slab_of(
              it->first);  // NOLINT(cppcoreguidelines-owning-memory): slabs own nothing else
        }
      }
      a->drop_events(events_);
      (void)dev_.free_reservation(a->base(), a->bytes());
    }
  }
}

result<stream_state*> stream_table::get(void* native, bool& made) {
  made = false;
  if (native == last_native_ && last_state_ != nullptr) return last_state_;
  auto it = streams_.find(native);
  if (it == streams_.end()) {
    auto stream = dev_.wrap_stream(native);
    if (!stream) return stream.error();
    auto small_base = dev_.reserve(arena_bytes_);
    if (!small_base) return small_base.error();
    auto large_base = dev_.reserve(arena_bytes_);
    if (!large_base) {
      (void)dev_.free_reservation(*small_base, arena_bytes_);
      return large_base.error();
    }
    try {
      auto st = std::make_unique<stream_state>();
      st->stream = *stream;
      st->small = std::make_unique<stream_arena>(*stream, pool_kind::small, *small_base,
                                                 arena_bytes_, granularity_);
      st->large = std::make_unique<stream_arena>(*stream, pool_kind::large, *large_base,
                                                 arena_bytes_, granularity_);
      arenas_.reserve(arenas_.size() + 2);
      owners_.reserve(owners_.size() + 2);
      it = streams_.emplace(native, std::move(st)).first;
    } catch (const std::bad_alloc&) {
      (void)dev_.free_reservation(*small_base, arena_bytes_);
      (void)dev_.free_reservation(*large_base, arena_bytes_);
      return status{errc::out_of_memory, "host out of memory for a new stream's arenas"};
    }
    stream_state* st = it->second.get();
    arenas_.push_back(st->small.get());
    arenas_.push_back(st->large.get());
    owners_.push_back(st);
    owners_.push_back(st);
    made = true;
  }
  last_native_ = native;
  last_state_ = it->second.get();
  return last_state_;
}

stream_state* stream_table::find(void* native) const {
  auto it = streams_.find(native);
  return it == streams_.end() ? nullptr : it->second.get();
}

std::size_t stream_table::arena_of(std::uintptr_t p) {
  std::size_t k = last_arena_;
  if (k >= arenas_.size() || !arenas_[k]->contains(p)) {
    k = 0;
    while (k < arenas_.size() && !arenas_[k]->contains(p)) ++k;
  }
  if (k < arenas_.size()) last_arena_ = k;
  return k;
}

}  // namespace strata
