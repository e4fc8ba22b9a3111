#include "stream_arena.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <new>

#include "size_classes.hpp"

namespace strata {

stream_arena::stream_arena(stream_handle stream, pool_kind kind, std::uintptr_t base,
                           std::size_t bytes, std::size_t granularity)
    : stream_(stream),
      kind_(kind),
      page_shift_(static_cast<unsigned>(std::countr_zero(granularity))),
      blocks_(base, bytes),
      page_ids_(bytes / granularity, unmapped),
      mapped_bits_((bytes / granularity + 63) / 64, 0),
      page_epoch_(bytes / granularity, 0),
      slab_shift_(static_cast<unsigned>(std::countr_zero(size_classes::slab_unit(granularity)))) {
  if (kind != pool_kind::small) return;
  // Anonymous memory reads as zero (null) and costs nothing until written:
  // only the entries of units that ever hold a slab take memory.
  slab_table_bytes_ = (bytes >> slab_shift_) * sizeof(std::atomic<slab*>);
  void* table = mmap(nullptr, slab_table_bytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED) throw std::bad_alloc();
  slabs_ = static_cast<std::atomic<slab*>*>(table);
}

stream_arena::~stream_arena() {
  if (slabs_ != nullptr) munmap(slabs_, slab_table_bytes_);
}

void stream_arena::set_slab(std::uintptr_t addr, std::size_t bytes, slab* s) noexcept {
  const std::size_t first = (addr - blocks_.base()) >> slab_shift_;
  const std::size_t last = (addr + bytes - 1 - blocks_.base()) >> slab_shift_;
  for (std::size_t i = first; i <= last; ++i) slabs_[i].store(s, std::memory_order_release);
}

void stream_arena::mark_freed(std::uintptr_t addr, std::size_t bytes) noexcept {
  const std::size_t last = page_of(addr + bytes - 1);
  for (std::size_t i = page_of(addr); i <= last; ++i) page_epoch_[i] = open_;
  ++open_frees_;
}

void stream_arena::set_page(std::size_t i, std::uint32_t id) noexcept {
  const bool was = page_ids_[i] != unmapped;
  const bool now = id != unmapped;
  page_ids_[i] = id;
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if (now && !was) {
    mapped_bits_[i / 64] |= bit;
    ++mapped_pages_;
  } else if (was && !now) {
    mapped_bits_[i / 64] &= ~bit;
    --mapped_pages_;
  }
}

std::size_t stream_arena::next_mapped(std::size_t from, std::size_t to) const noexcept {
  while (from < to) {
    const std::uint64_t word = mapped_bits_[from / 64] >> (from % 64);
    if (word != 0) {
      const std::size_t found = from + static_cast<std::size_t>(std::countr_zero(word));
      return found < to ? found : to;
    }
    from = (from / 64 + 1) * 64;
  }
  return to;
}

std::size_t stream_arena::next_unmapped(std::size_t from, std::size_t to) const noexcept {
  while (from < to) {
    const std::uint64_t word = ~mapped_bits_[from / 64] >> (from % 64);
    if (word != 0) {
      const std::size_t found = from + static_cast<std::size_t>(std::countr_zero(word));
      return found < to ? found : to;
    }
    from = (from / 64 + 1) * 64;
  }
  return to;
}

std::size_t stream_arena::unmapped_pages(std::size_t from, std::size_t to) const noexcept {
  std::size_t n = 0;
  while (from < to) {
    const std::size_t bits = std::min<std::size_t>(64 - from % 64, to - from);
    std::uint64_t word = ~mapped_bits_[from / 64] >> (from % 64);
    if (bits < 64) word &= (std::uint64_t{1} << bits) - 1;
    n += static_cast<std::size_t>(std::popcount(word));
    from += bits;
  }
  return n;
}

status stream_arena::seal(device& dev, event_pool& events) {
  if (open_frees_ == 0) return {};
  auto e = events.get();
  if (!e) return e.error();
  if (auto s = dev.record_event(*e, stream_); !s) {
    events.put(*e);
    return s;
  }
  sealed_.push_back({*e, open_});
  ++open_;
  open_frees_ = 0;
  last_seal_s_ = dev.host_clock();
  return {};
}

status stream_arena::poll(device& dev, event_pool& events) {
  while (!sealed_.empty()) {
    auto done = dev.query_event(sealed_.front().event);
    if (!done.ok()) return done.error();
    if (!done.yes()) {
      last_unfinished_s_ = dev.host_clock();
      break;
    }
    completed_ = sealed_.front().epoch;
    events.put(sealed_.front().event);
    sealed_.pop_front();
  }
  return {};
}

status stream_arena::poll_if_due(device& dev, event_pool& events) {
  if (sealed_.empty() || dev.host_clock() - last_unfinished_s_ < epoch_interval_s) return {};
  return poll(dev, events);
}

status stream_arena::wait_idle(std::uint64_t epoch, device& dev, event_pool& events) {
  if (idle(epoch)) return {};
  if (epoch >= open_) {
    if (auto s = seal(dev, events); !s) return s;
    epoch = open_ - 1;  // the last sealed epoch covers every free so far
    if (idle(epoch)) return {};
  }
  for (const auto& sealed : sealed_) {
    if (sealed.epoch >= epoch) {
      if (auto s = dev.synchronize_event(sealed.event); !s) return s;
      break;
    }
  }
  return poll(dev, events);
}

void stream_arena::drop_events(event_pool& events) {
  for (const auto& sealed : sealed_) events.put(sealed.event);
  sealed_.clear();
}

}  // namespace strata
