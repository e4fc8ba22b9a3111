#include "pinned_host_pool.hpp"

#include <algorithm>
#include <string>

namespace strata {

result<std::unique_ptr<pinned_host_pool>> pinned_host_pool::create(device& dev,
                                                                   const tier_options& options) {
  try {
    return std::unique_ptr<pinned_host_pool>(new pinned_host_pool(dev, options));
  } catch (const std::bad_alloc&) {
    return status{errc::out_of_memory, "pinned host pool: host out of memory"};
  }
}

pinned_host_pool::~pinned_host_pool() = default;

std::uint64_t pinned_host_pool::room() const noexcept {
  if (options_.host_capacity == 0) return UINT64_MAX;
  const std::uint64_t pinned = small_.pinned() + large_.pinned();
  return pinned >= options_.host_capacity ? 0 : options_.host_capacity - pinned;
}

std::uint64_t pinned_host_pool::headroom(std::uint64_t need) const noexcept {
  const std::uint64_t peak = std::max(peak_in_use_, in_use_ + need);
  const auto bound =
      static_cast<std::uint64_t>((1.0 + options_.host_kept) * static_cast<double>(peak));
  const std::uint64_t pinned = small_.pinned() + large_.pinned();
  return pinned >= bound ? 0 : bound - pinned;
}

void pinned_host_pool::note_pinned() noexcept {
  peak_pinned_ = std::max(peak_pinned_, small_.pinned() + large_.pinned());
}

void pinned_host_pool::note_in_use(std::uint64_t added) noexcept {
  in_use_ += added;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
}

status pinned_host_pool::out_of_memory(std::size_t bytes) {
  failed_.fetch_add(1, std::memory_order_relaxed);
  return {errc::out_of_memory, "pinned host pool: no pinned memory for " + std::to_string(bytes) +
                                   " bytes (capacity " + std::to_string(options_.host_capacity) +
                                   ", pinned " + std::to_string(stats().pinned_bytes) + ")"};
}

result<void*> pinned_host_pool::allocate_large(std::size_t bytes) {
  void* p = nullptr;
  {
    std::lock_guard lock(mu_);
    p = large_.take(bytes, room(), headroom(pinned_block_cache::rounded(bytes)));
    if (p != nullptr) {
      note_in_use(large_.live_size(p));
      note_pinned();
    }
  }
  if (p == nullptr) return out_of_memory(bytes);
  return p;
}

result<void*> pinned_host_pool::allocate(std::size_t bytes) {
  if (bytes == 0) return status{errc::invalid_argument, "pinned host pool: allocation of 0 bytes"};
  if (bytes >= options_.host_large || bytes > pinned_run_heap::max_bytes) {
    return allocate_large(bytes);
  }
  void* p = nullptr;
  {
    std::lock_guard lock(mu_);
    try {
      // A new chunk past the headroom (or the capacity) takes the kept
      // large buffers' room first.
      p = small_.allocate(bytes, std::min(room(), headroom(pinned_run_heap::class_size(bytes))));
      if (p == nullptr) {
        large_.trim(0);
        p = small_.allocate(bytes, room());
      }
    } catch (const std::bad_alloc&) {
      p = nullptr;  // the runs' descriptions are ordinary memory
    }
    if (p != nullptr) {
      note_in_use(pinned_run_heap::class_size(bytes));
      note_pinned();
    }
  }
  if (p == nullptr) return out_of_memory(bytes);
  return p;
}

void pinned_host_pool::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mu_);
  if (const std::size_t bytes = large_.live_size(ptr); bytes != 0) {
    in_use_ -= bytes;
    large_.give(ptr);
    return;
  }
  if (const std::size_t bytes = small_.usable_size(ptr); bytes != 0) {
    in_use_ -= bytes;
    small_.free(ptr);
  }
}

pinned_host_pool::counters pinned_host_pool::stats() {
  counters c;
  c.failed = failed_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  c.in_use_bytes = in_use_;
  c.peak_in_use_bytes = peak_in_use_;
  c.pinned_bytes = small_.pinned() + large_.pinned();
  c.peak_pinned_bytes = peak_pinned_;
  c.chunks = small_.chunks();
  c.kept_bytes = large_.kept();
  c.metadata_bytes = small_.metadata_bytes();
  c.device_allocations = small_.chunks() + large_.device_allocations();
  c.device_releases = large_.device_releases();
  return c;
}

}  // namespace strata
