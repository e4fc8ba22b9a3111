#include "pinned_host_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace strata {

namespace {

pinned_host_pool* pool_of(extent_hooks_t* h) {
  // The hooks are the first member of `hooked`, whose second is the pool.
  return *reinterpret_cast<pinned_host_pool**>(reinterpret_cast<char*>(h) + sizeof(extent_hooks_t));
}

}  // namespace

result<std::unique_ptr<pinned_host_pool>> pinned_host_pool::create(device& dev,
                                                                   const offload_options& options) {
  auto je = jemalloc_library::get();
  if (!je) return je.error();
  std::unique_ptr<pinned_host_pool> pool(new pinned_host_pool(dev, options, **je));
  extent_hooks_t* hooks = &pool->hooked_.hooks;
  std::size_t size = sizeof(pool->arena_);
  // The new value is the hooks pointer itself, hence sizeof a pointer.
  // NOLINTNEXTLINE(bugprone-sizeof-expression)
  if (int rc = (*je)->mallctl("arenas.create", &pool->arena_, &size, &hooks, sizeof(hooks));
      rc != 0) {
    return status{errc::not_supported,
                  "pinned host pool: jemalloc arenas.create failed: " + std::to_string(rc)};
  }
  pool->flags_ = MALLOCX_ARENA(pool->arena_) | MALLOCX_TCACHE_NONE;
  // jemalloc grows its retained space geometrically, asking the hooks for
  // ever larger extents; pinned memory should come as needed.
  // Limited to the chunk size: with 32 MiB chunks, the least waste measured
  // on cs336_train_fwd_bwd_cold (22%, against 45% unlimited; 16 to 512 MiB
  // chunks: 28 to 62%).
  std::size_t grow = options.host_chunk;
  const std::string limit = "arena." + std::to_string(pool->arena_) + ".retain_grow_limit";
  (void)(*je)->mallctl(limit.c_str(), nullptr, nullptr, &grow, sizeof grow);  // best effort
  return pool;
}

pinned_host_pool::pinned_host_pool(device& dev, offload_options options, const jemalloc_library& je)
    : dev_(dev), options_(std::move(options)), je_(je), large_(dev) {
  hooked_.hooks = {hook_alloc,   hook_dalloc,  hook_destroy, hook_commit, hook_decline,
                   hook_decline, hook_decline, hook_split,   hook_merge};
  hooked_.pool = this;
}

pinned_host_pool::~pinned_host_pool() {
  const std::string destroy = "arena." + std::to_string(arena_) + ".destroy";
  je_.mallctl(destroy.c_str(), nullptr, nullptr, nullptr, 0);
  for (const auto& [base, bytes] : chunks_) (void)dev_.host_free(reinterpret_cast<void*>(base));
  for (const auto& [base, bytes] : metadata_) ::munmap(base, bytes);
}

void* pinned_host_pool::metadata(std::size_t size, std::size_t alignment) {
  // Anonymous memory is zeroed; map alignment more and trim both ends.
  void* raw =
      ::mmap(nullptr, size + alignment, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = (base + alignment - 1) & ~(alignment - 1);
  if (start > base) ::munmap(raw, start - base);
  if (const std::uintptr_t tail = base + alignment - start; tail > 0) {
    ::munmap(reinterpret_cast<void*>(start + size), tail);
  }
  std::lock_guard lock(mu_);
  metadata_.emplace_back(reinterpret_cast<void*>(start), size);
  metadata_bytes_ += size;
  return reinterpret_cast<void*>(start);
}

void* pinned_host_pool::carve(std::size_t size, std::size_t alignment) {
  std::lock_guard lock(mu_);
  const auto fits = [&](std::uintptr_t base, std::size_t bytes) {
    const std::uintptr_t start = (base + alignment - 1) & ~(alignment - 1);
    return start - base <= bytes && bytes - (start - base) >= size;
  };
  auto it = std::find_if(unused_.begin(), unused_.end(),
                         [&](const auto& range) { return fits(range.first, range.second); });
  if (it == unused_.end()) {
    const std::size_t bytes = std::max(options_.host_chunk, size + alignment);
    if (bytes > room()) large_.trim(0);  // kept buffers go first
    if (bytes > room()) return nullptr;
    auto chunk = dev_.host_alloc(bytes);
    if (!chunk && large_.kept() > 0) {
      large_.trim(0);
      chunk = dev_.host_alloc(bytes);
    }
    if (!chunk) return nullptr;
    const auto base = reinterpret_cast<std::uintptr_t>(*chunk);
    chunks_.emplace(base, bytes);
    chunk_bytes_ += bytes;
    note_pinned();
    it = unused_.emplace(base, bytes).first;
  }
  const std::uintptr_t base = it->first;
  const std::size_t bytes = it->second;
  const std::uintptr_t start = (base + alignment - 1) & ~(alignment - 1);
  unused_.erase(it);
  if (start > base) unused_.emplace(base, start - base);
  if (start + size < base + bytes) unused_.emplace(start + size, base + bytes - start - size);
  return reinterpret_cast<void*>(start);
}

bool pinned_host_pool::same_chunk(const void* a, const void* b) {
  std::lock_guard lock(mu_);
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  auto it = chunks_.upper_bound(pa);
  if (it == chunks_.begin()) return false;
  --it;
  return pb >= it->first && pb < it->first + it->second;
}

// jemalloc's hook signature: `zero` is read only, but it is a bool*.
// NOLINTBEGIN(readability-non-const-parameter)
void* pinned_host_pool::hook_alloc(extent_hooks_t* h, void* new_addr, std::size_t size,
                                   std::size_t alignment, bool* zero, bool* commit,
                                   unsigned /*arena*/) {
  // NOLINTEND(readability-non-const-parameter)
  if (new_addr != nullptr) return nullptr;  // no growing in place
  if (alignment >= metadata_alignment) {
    *commit = true;
    return pool_of(h)->metadata(size, alignment);  // zeroed
  }
  void* p = pool_of(h)->carve(size, alignment);
  if (p == nullptr) return nullptr;
  if (*zero) std::memset(p, 0, size);
  *commit = true;
  return p;
}

bool pinned_host_pool::hook_dalloc(extent_hooks_t* /*h*/, void* /*addr*/, std::size_t /*size*/,
                                   bool /*committed*/, unsigned /*arena*/) {
  return true;  // declined: jemalloc keeps the extent for reuse
}

void pinned_host_pool::hook_destroy(extent_hooks_t* /*h*/, void* /*addr*/, std::size_t /*size*/,
                                    bool /*committed*/, unsigned /*arena*/) {
  // The chunks go back to the device in the pool's destructor.
}

bool pinned_host_pool::hook_commit(extent_hooks_t* /*h*/, void* /*addr*/, std::size_t /*size*/,
                                   std::size_t /*offset*/, std::size_t /*length*/,
                                   unsigned /*arena*/) {
  return false;  // always committed
}

bool pinned_host_pool::hook_decline(extent_hooks_t* /*h*/, void* /*addr*/, std::size_t /*size*/,
                                    std::size_t /*offset*/, std::size_t /*length*/,
                                    unsigned /*arena*/) {
  return true;  // no decommit, no purge: pinned memory stays as it is
}

bool pinned_host_pool::hook_split(extent_hooks_t* /*h*/, void* /*addr*/, std::size_t /*size*/,
                                  std::size_t /*a*/, std::size_t /*b*/, bool /*committed*/,
                                  unsigned /*arena*/) {
  return false;  // any extent may be split
}

bool pinned_host_pool::hook_merge(extent_hooks_t* h, void* a, std::size_t /*size_a*/, void* b,
                                  std::size_t /*size_b*/, bool /*committed*/, unsigned /*arena*/) {
  return !pool_of(h)->same_chunk(a, b);  // merge only within one chunk
}

std::uint64_t pinned_host_pool::room() const noexcept {
  if (options_.host_capacity == 0) return UINT64_MAX;
  const std::uint64_t pinned = chunk_bytes_ + large_.pinned();
  return pinned >= options_.host_capacity ? 0 : options_.host_capacity - pinned;
}

void pinned_host_pool::note_pinned() noexcept {
  peak_pinned_ = std::max(peak_pinned_, chunk_bytes_ + large_.pinned());
}

void pinned_host_pool::note_in_use(std::uint64_t added) noexcept {
  const std::uint64_t now = in_use_.fetch_add(added, std::memory_order_relaxed) + added;
  std::uint64_t peak = peak_in_use_.load(std::memory_order_relaxed);
  while (now > peak && !peak_in_use_.compare_exchange_weak(peak, now)) {
  }
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
    p = large_.take(bytes, room());
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
  if (bytes >= options_.host_large) return allocate_large(bytes);
  void* p = je_.mallocx(bytes, flags_);
  if (p == nullptr) return out_of_memory(bytes);
  note_in_use(je_.sallocx(p, flags_));
  return p;
}

void pinned_host_pool::free(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard lock(mu_);
    if (const std::size_t bytes = large_.live_size(ptr); bytes != 0) {
      const std::uint64_t in_use = in_use_.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
      const auto keep =
          static_cast<std::uint64_t>(options_.host_kept * static_cast<double>(in_use));
      large_.give(ptr, keep);
      return;
    }
  }
  in_use_.fetch_sub(je_.sallocx(ptr, flags_), std::memory_order_relaxed);
  je_.dallocx(ptr, flags_);
}

pinned_host_pool::counters pinned_host_pool::stats() {
  counters c;
  c.in_use_bytes = in_use_.load(std::memory_order_relaxed);
  c.peak_in_use_bytes = peak_in_use_.load(std::memory_order_relaxed);
  c.failed = failed_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  c.pinned_bytes = chunk_bytes_ + large_.pinned();
  c.peak_pinned_bytes = peak_pinned_;
  c.chunks = chunks_.size();
  c.kept_bytes = large_.kept();
  c.metadata_bytes = metadata_bytes_;
  return c;
}

}  // namespace strata
