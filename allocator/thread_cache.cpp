#include "thread_cache.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "caching_allocator.hpp"
#include "stream_arena.hpp"

namespace strata {

namespace {

struct registry {
  std::mutex mu;
  std::unordered_set<std::uint64_t> live;
  std::uint64_t next = 1;
  std::atomic<std::uint64_t> deaths{0};  // allocators unregistered so far
};

registry& the_registry() {
  static registry r;  // never destroyed before thread caches that use it
  return r;
}

}  // namespace

thread_local thread_cache* thread_cache::current_ = nullptr;

thread_cache& thread_cache::create_for_thread() {
  // Allocated once per thread (not per call), so a dlopen'ed libstrata.so
  // keeps its static TLS tiny. The holder flushes the cache at thread exit.
  struct holder {
    std::unique_ptr<thread_cache> cache = std::make_unique<thread_cache>();
    holder(const holder&) = delete;
    holder& operator=(const holder&) = delete;
    holder(holder&&) = delete;
    holder& operator=(holder&&) = delete;
    holder() = default;
    ~holder() {
      current_ = nullptr;
      cache.reset();
    }
  };
  thread_local holder h;
  current_ = h.cache.get();
  return *current_;
}

thread_cache::~thread_cache() {
  detach();
}

void thread_cache::bind(caching_allocator* a, std::uint64_t serial, void* stream,
                        stream_arena* arena, const size_classes& classes) noexcept {
  for (std::uint32_t c = 0; c < classes.count(); ++c) {
    const std::size_t fit = bin_bytes / classes.class_size(c);
    bins_[c].limit =
        static_cast<std::uint32_t>(fit == 0 ? 1 : std::min<std::size_t>(fit, bin_capacity));
  }
  owner_ = a;
  serial_ = serial;
  stream_ = stream;
  arena_ = arena;
  arena_base_ = arena->base();
  arena_bytes_ = arena->bytes();
  slab_shift_ = arena->slab_shift();
  slabs_ = arena->slab_table();
  misses_ = 0;
  deaths_at_bind_ = the_registry().deaths.load(std::memory_order_relaxed);
}

bool thread_cache::missed() noexcept {
  if (++misses_ >= 256) return true;
  // The owner may be gone: re-binding then only drops what is parked.
  if (the_registry().deaths.load(std::memory_order_relaxed) != deaths_at_bind_) return true;
  // Nothing parked: re-binding costs nothing.
  return slot_.load() == large_slot::empty && !holds_objects();
}

void thread_cache::unbind() noexcept {
  owner_ = nullptr;
  serial_ = 0;
  stream_ = nullptr;
  arena_ = nullptr;
  arena_base_ = 0;
  arena_bytes_ = 0;
  slabs_ = nullptr;
  misses_ = 0;
  slot_.state.store(large_slot::empty, std::memory_order_relaxed);
}

std::uint64_t thread_cache::register_allocator() {
  registry& r = the_registry();
  std::lock_guard lock(r.mu);
  const std::uint64_t serial = r.next++;
  r.live.insert(serial);
  return serial;
}

void thread_cache::unregister_allocator(std::uint64_t serial) {
  registry& r = the_registry();
  std::lock_guard lock(r.mu);
  r.live.erase(serial);
  r.deaths.fetch_add(1, std::memory_order_relaxed);
}

void thread_cache::detach() {
  if (owner_ == nullptr) return;
  registry& r = the_registry();
  std::lock_guard lock(r.mu);  // the owner cannot finish dying while this is held
  if (r.live.contains(serial_)) {
    owner_->release_cache(*this);
  } else {
    drain([](const entry&) {});  // its memory went back with its allocator
    reset_counters();
    unbind();
  }
}

}  // namespace strata
