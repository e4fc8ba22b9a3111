#include "stream_table.hpp"

#include <array>
#include <new>

namespace strata {

stream_table::~stream_table() {
  for (auto& [native, st] : streams_) {
    for (slab* s = st->slabs; s != nullptr;) {
      slab* older = s->older;
      delete s;  // NOLINT(cppcoreguidelines-owning-memory): the list owns them
      s = older;
    }
    for (stream_arena* a : {st->small.get(), st->large.get()}) {
      // (The page supply, destroyed first, unmapped and released the pages.)
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
    std::array<std::uintptr_t, 2> bases{};
    std::array<std::size_t, 2> sizes{small_bytes_, large_bytes_};
    const auto give_back = [&](std::size_t made) {
      for (std::size_t k = 0; k < made; ++k) (void)dev_.free_reservation(bases[k], sizes[k]);
    };
    for (std::size_t k = 0; k < bases.size(); ++k) {
      auto base = dev_.reserve(sizes[k]);
      while (!base && base.code() == errc::out_of_memory && sizes[k] / 2 >= least_bytes_) {
        sizes[k] = (sizes[k] / 2 + granularity_ - 1) / granularity_ * granularity_;
        base = dev_.reserve(sizes[k]);
      }
      if (!base) {
        give_back(k);
        return base.error();
      }
      bases[k] = *base;
    }
    try {
      auto st = std::make_unique<stream_state>();
      st->stream = *stream;
      st->small = std::make_unique<stream_arena>(*stream, pool_kind::small, bases[0], sizes[0],
                                                 granularity_);
      st->large = std::make_unique<stream_arena>(*stream, pool_kind::large, bases[1], sizes[1],
                                                 granularity_);
      arenas_.reserve(arenas_.size() + 2);
      owners_.reserve(owners_.size() + 2);
      it = streams_.emplace(native, std::move(st)).first;
    } catch (const std::bad_alloc&) {
      give_back(bases.size());
      return status{errc::out_of_memory, "host out of memory for a new stream's arenas"};
    }
    stream_state* st = it->second.get();
    for (stream_arena* a : {st->small.get(), st->large.get()}) {
      arenas_.push_back(a);
      owners_.push_back(st);
    }
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
