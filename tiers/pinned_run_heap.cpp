#include "pinned_run_heap.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <iterator>
#include <new>

namespace strata {

pinned_run_heap::~pinned_run_heap() {
  for (const auto& [base, bytes] : chunks_) (void)dev_.host_free(reinterpret_cast<void*>(base));
}

std::uint32_t pinned_run_heap::class_of(std::size_t bytes) noexcept {
  if (bytes <= 128) return static_cast<std::uint32_t>((bytes + 15) / 16 - 1);
  // Four classes per doubling: (2^k, 2^(k+1)] splits into quarters.
  const std::size_t m = bytes - 1;
  const auto k = static_cast<std::uint32_t>(std::bit_width(m) - 1);  // >= 7
  const auto quarter = static_cast<std::uint32_t>((m >> (k - 2)) & 3);
  return 8 + (k - 7) * 4 + quarter;
}

std::size_t pinned_run_heap::size_of_class(std::uint32_t cls) noexcept {
  if (cls < 8) return (std::size_t{cls} + 1) * 16;
  const std::uint32_t k = 7 + (cls - 8) / 4;
  const std::uint32_t quarter = (cls - 8) % 4;
  return (std::size_t{1} << k) + (std::size_t{quarter} + 1) * (std::size_t{1} << (k - 2));
}

std::size_t pinned_run_heap::class_size(std::size_t bytes) noexcept {
  return size_of_class(class_of(bytes));
}

std::uint64_t pinned_run_heap::metadata_bytes() const noexcept {
  // A run, its bits and its map node (key, pointer, three links and a colour).
  std::uint64_t bytes = 0;
  for (const auto& [base, r] : runs_) bytes += sizeof(run) + 48 + r->handed.size() * 8;
  return bytes;
}

std::uintptr_t pinned_run_heap::carve(std::size_t bytes, std::uint64_t room) {
  const auto aligned = [](std::uintptr_t a) {
    return (a + run_alignment - 1) & ~(run_alignment - 1);
  };
  auto it = std::find_if(space_.begin(), space_.end(), [&](const auto& r) {
    const std::uintptr_t start = aligned(r.first);
    return start - r.first <= r.second && r.second - (start - r.first) >= bytes;
  });
  if (it == space_.end()) {
    const std::size_t want = std::max(chunk_bytes_, bytes + run_alignment);
    if (want > room) return 0;
    auto chunk = dev_.host_alloc(want);
    if (!chunk) return 0;
    const auto base = reinterpret_cast<std::uintptr_t>(*chunk);
    try {
      chunks_.emplace(base, want);
      it = space_.emplace(base, want).first;
    } catch (const std::bad_alloc&) {  // the chunk goes back, not lost
      chunks_.erase(base);
      (void)dev_.host_free(*chunk);
      throw;
    }
    chunk_bytes_held_ += want;
  }
  const std::uintptr_t from = it->first;
  const std::uintptr_t to = from + it->second;
  const std::uintptr_t start = aligned(from);
  space_.erase(it);
  if (start > from) space_.emplace(from, start - from);
  if (start + bytes < to) space_.emplace(start + bytes, to - start - bytes);
  return start;
}

void pinned_run_heap::uncarve(std::uintptr_t addr, std::size_t bytes) {
  const auto chunk = std::prev(chunks_.upper_bound(addr));
  const std::uintptr_t end = chunk->first + chunk->second;
  auto next = space_.lower_bound(addr);
  std::uintptr_t from = addr;
  std::size_t size = bytes;
  // Merge with free space right after, and right before, in the same chunk.
  if (next != space_.end() && next->first == addr + bytes && next->first < end) {
    size += next->second;
    next = space_.erase(next);
  }
  if (next != space_.begin()) {
    auto prev = std::prev(next);
    if (prev->first >= chunk->first && prev->first + prev->second == addr) {
      from = prev->first;
      size += prev->second;
      space_.erase(prev);
    }
  }
  space_.emplace(from, size);
}

void pinned_run_heap::link(run& r) {
  r.prev = nullptr;
  r.next = partial_[r.cls];
  if (r.next != nullptr) r.next->prev = &r;
  partial_[r.cls] = &r;
  r.listed = true;
}

void pinned_run_heap::unlink(run& r) {
  if (r.prev != nullptr) r.prev->next = r.next;
  if (r.next != nullptr) r.next->prev = r.prev;
  if (partial_[r.cls] == &r) partial_[r.cls] = r.next;
  r.prev = r.next = nullptr;
  r.listed = false;
}

pinned_run_heap::run* pinned_run_heap::new_run(std::uint32_t cls, std::uint64_t room) {
  const std::size_t object = size_of_class(cls);
  const auto capacity = static_cast<std::uint32_t>(std::max<std::size_t>(1, run_target / object));
  // Everything that may throw before the space is carved, or the carve is
  // undone: no chunk space is lost to a failed run.
  auto r = std::make_unique<run>();
  r->object = object;
  r->cls = cls;
  r->capacity = capacity;
  r->handed.assign((capacity + 63) / 64, 0);
  r->base = carve(object * capacity, room);
  if (r->base == 0) return nullptr;
  run* made = r.get();
  try {
    runs_.emplace(made->base, std::move(r));
  } catch (const std::bad_alloc&) {
    uncarve(made->base, made->bytes());
    throw;
  }
  link(*made);
  ++empty_[cls];
  return made;
}

void pinned_run_heap::drop_run(run& r) {
  unlink(r);
  uncarve(r.base, r.bytes());
  runs_.erase(r.base);
}

void* pinned_run_heap::allocate(std::size_t bytes, std::uint64_t room) {
  assert(bytes > 0 && bytes <= max_bytes);
  const std::uint32_t cls = class_of(bytes);
  run* r = partial_[cls];
  if (r == nullptr) r = new_run(cls, room);
  if (r == nullptr) return nullptr;
  if (r->live == 0) --empty_[cls];
  void* p = nullptr;
  if (r->free_list != nullptr) {
    p = r->free_list;
    r->free_list = *static_cast<void**>(p);
  } else {
    p = reinterpret_cast<void*>(r->base + std::size_t{r->fresh} * r->object);
    ++r->fresh;
  }
  const std::size_t i = (reinterpret_cast<std::uintptr_t>(p) - r->base) / r->object;
  r->handed[i / 64] |= std::uint64_t{1} << (i % 64);
  if (++r->live == r->capacity) unlink(*r);
  return p;
}

std::size_t pinned_run_heap::usable_size(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = runs_.upper_bound(a);
  if (it == runs_.begin()) return 0;
  const run& r = *std::prev(it)->second;
  if (a >= r.base + r.bytes() || (a - r.base) % r.object != 0) return 0;
  const std::size_t i = (a - r.base) / r.object;
  return (r.handed[i / 64] >> (i % 64) & 1) != 0 ? r.object : 0;
}

void pinned_run_heap::free(void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  run& r = *std::prev(runs_.upper_bound(a))->second;
  const std::size_t i = (a - r.base) / r.object;
  r.handed[i / 64] &= ~(std::uint64_t{1} << (i % 64));
  *static_cast<void**>(p) = r.free_list;
  r.free_list = p;
  --r.live;
  if (!r.listed) link(r);
  if (r.live != 0) return;
  if (empty_[r.cls] == 0) {
    ++empty_[r.cls];  // keep one empty run per class
    return;
  }
  drop_run(r);
}

}  // namespace strata
