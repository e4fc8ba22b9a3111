#include "sim_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include "strata/option_table.hpp"

namespace strata {

namespace {

status bad_call(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

status sys_error(const char* call) {
  return {errc::device_error,
          std::string("sim device: ") + call + " failed: " + std::system_category().message(errno)};
}

std::string range_text(std::uintptr_t va, std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[0x%zx, 0x%zx)", static_cast<std::size_t>(va),
                static_cast<std::size_t>(va + bytes));
  return buf;
}

}  // namespace

result<std::unique_ptr<sim_memory>> sim_memory::create(std::size_t capacity,
                                                       std::size_t granularity, bool backed) {
  const int fd = backed ? memfd_create("strata-sim-device", MFD_CLOEXEC) : -1;
  if (backed && fd < 0) return sys_error("memfd_create");
  return std::unique_ptr<sim_memory>(new sim_memory(fd, capacity, granularity));
}

sim_memory::sim_memory(int fd, std::size_t capacity, std::size_t granularity)
    : fd_(fd), capacity_(capacity), slices_(granularity, 0) {}

sim_memory::~sim_memory() {
  for (const auto& [base, r] : reservations_) {
    if (fd_ >= 0) munmap(reinterpret_cast<void*>(base), r.bytes);
  }
  if (fd_ >= 0) close(fd_);
}

memory_info sim_memory::info() {
  std::lock_guard lock(mu_);
  return {capacity_, capacity_ - used_};
}

result<std::uintptr_t> sim_memory::reserve(std::size_t bytes, std::size_t alignment) {
  if (bytes > (std::size_t{1} << 46) || alignment > (std::size_t{1} << 40)) {
    return status{errc::out_of_memory,
                  "sim device: cannot reserve " + format_bytes(bytes) + " of address space"};
  }
  if (fd_ < 0) return reserve_unbacked(bytes, alignment);
  const std::size_t padded = bytes + alignment;
  void* raw = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    return status{errc::out_of_memory,
                  "sim device: cannot reserve " + format_bytes(bytes) +
                      " of address space: " + std::system_category().message(errno)};
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (start + alignment - 1) & ~(alignment - 1);
  if (base > start) munmap(raw, base - start);
  if (const auto tail = start + padded - (base + bytes); tail > 0) {
    munmap(reinterpret_cast<void*>(base + bytes), tail);
  }
  std::lock_guard lock(mu_);
  reservations_[base].bytes = bytes;
  return base;
}

result<std::uintptr_t> sim_memory::reserve_unbacked(std::size_t bytes, std::size_t alignment) {
  // Addresses from 2^58 up: above every user mapping (x86-64 and AArch64
  // user space ends below 2^57), so no host pointer can equal one, and
  // touching one faults. Shared by every timing-only device, never reused.
  static std::atomic<std::uintptr_t> next{std::uintptr_t{1} << 58};
  std::uintptr_t from = next.load(std::memory_order_relaxed);
  std::uintptr_t base = 0;
  do {
    base = (from + alignment - 1) & ~(alignment - 1);
  } while (!next.compare_exchange_weak(from, base + bytes, std::memory_order_relaxed));
  std::lock_guard lock(mu_);
  reservations_[base].bytes = bytes;
  return base;
}

status sim_memory::free_reservation(std::uintptr_t base, std::size_t bytes) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second.bytes != bytes) {
    return bad_call("free_reservation: " + range_text(base, bytes) +
                    " is not a reservation of this device");
  }
  if (!it->second.mappings.empty()) {
    return bad_call("free_reservation: " + range_text(base, bytes) + " still has " +
                    std::to_string(it->second.mappings.size()) + " mapping(s); unmap them first");
  }
  if (fd_ >= 0 && munmap(reinterpret_cast<void*>(base), bytes) != 0) return sys_error("munmap");
  reservations_.erase(it);
  return {};
}

result<page_run> sim_memory::create_pages(std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes > capacity_ - used_) {
    return status{errc::out_of_memory,
                  "sim device out of memory: requested " + format_bytes(bytes) + ", free " +
                      format_bytes(capacity_ - used_) + " of " + format_bytes(capacity_)};
  }
  const std::uint64_t offset = *slices_.take(bytes);  // no limit: always a slice
  if (fd_ >= 0 && offset + bytes > file_size_) {
    if (ftruncate(fd_, static_cast<off_t>(slices_.end())) != 0) {
      slices_.give(offset, bytes);  // beyond the file: handed out again only after a grow
      return sys_error("ftruncate");
    }
    file_size_ = slices_.end();
  }
  const std::uint64_t id = next_run_id_++;
  runs_.emplace(id, run_state{offset, bytes, 0, false});
  used_ += bytes;
  return page_run{id, bytes};
}

status sim_memory::release_pages(page_run run) {
  std::lock_guard lock(mu_);
  auto it = runs_.find(run.id);
  if (it == runs_.end() || it->second.released || it->second.bytes != run.bytes) {
    return bad_call("release_pages: page run " + std::to_string(run.id) +
                    " is not a live page run of this device");
  }
  it->second.released = true;
  if (it->second.mappings == 0) {
    free_slice(it->second.file_offset, it->second.bytes);
    runs_.erase(it);
  }
  return {};
}

status sim_memory::map(std::uintptr_t va, std::size_t bytes, page_run run) {
  std::lock_guard lock(mu_);
  auto rit = runs_.find(run.id);
  if (rit == runs_.end() || rit->second.released || rit->second.bytes != run.bytes) {
    return bad_call("map: page run " + std::to_string(run.id) +
                    " is not a live page run of this device");
  }
  reservation* r = find_reservation(va, bytes);
  if (r == nullptr) {
    return bad_call("map: " + range_text(va, bytes) + " is not inside one reservation");
  }
  auto next = r->mappings.lower_bound(va);
  const bool hits_next = next != r->mappings.end() && next->first < va + bytes;
  const bool hits_prev =
      next != r->mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > va;
  if (hits_next || hits_prev) {
    return bad_call("map: " + range_text(va, bytes) + " overlaps an existing mapping");
  }
  if (fd_ >= 0) {
    void* p = mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_,
                   static_cast<off_t>(rit->second.file_offset));
    if (p == MAP_FAILED) return sys_error("mmap");
  }
  r->mappings.emplace(va, mapping{bytes, run.id, false});
  ++rit->second.mappings;
  return {};
}

result<std::size_t> sim_memory::unmap(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  reservation* r = find_reservation(va, bytes);
  if (r == nullptr) return bad_call("unmap: " + range_text(va, bytes) + " is not mapped");
  auto [first, last] = whole_mappings(*r, va, bytes);
  if (first == r->mappings.end()) {
    return bad_call("unmap: " + range_text(va, bytes) +
                    " does not consist of whole earlier mappings");
  }
  if (fd_ >= 0) {
    void* p = mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return sys_error("mmap");
  }
  std::size_t covered = 0;
  for (auto it = first; it != last; ++it, ++covered) drop_mapping_ref(it->second.run);
  r->mappings.erase(first, last);
  return covered;
}

result<std::size_t> sim_memory::set_access(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  reservation* r = find_reservation(va, bytes);
  auto [first, last] =
      r != nullptr ? whole_mappings(*r, va, bytes) : std::pair<mapping_iter, mapping_iter>{};
  if (r == nullptr || first == r->mappings.end()) {
    return bad_call("set_access: " + range_text(va, bytes) +
                    " does not consist of whole mappings (the sim device requires it)");
  }
  if (fd_ >= 0 && mprotect(reinterpret_cast<void*>(va), bytes, PROT_READ | PROT_WRITE) != 0) {
    return sys_error("mprotect");
  }
  std::size_t covered = 0;
  for (auto it = first; it != last; ++it, ++covered) it->second.accessible = true;
  return covered;
}

status sim_memory::check_accessible(const void* ptr, std::size_t bytes, const char* what) {
  const auto va = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  reservation* r = find_reservation(va, bytes);
  if (r != nullptr) {
    auto it = r->mappings.upper_bound(va);
    if (it != r->mappings.begin()) {
      --it;
      std::uintptr_t covered = va;
      while (it != r->mappings.end() && it->first <= covered && it->second.accessible &&
             covered < va + bytes) {
        covered = it->first + it->second.bytes;
        ++it;
      }
      if (covered >= va + bytes) return {};
    }
  }
  return bad_call(std::string(what) + ": device range " + range_text(va, bytes) +
                  " is not mapped and accessible on this device");
}

sim_memory::reservation* sim_memory::find_reservation(std::uintptr_t va, std::size_t bytes) {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return nullptr;
  --it;
  const bool inside =
      va >= it->first && bytes <= it->second.bytes && va - it->first <= it->second.bytes - bytes;
  return inside ? &it->second : nullptr;
}

std::pair<sim_memory::mapping_iter, sim_memory::mapping_iter> sim_memory::whole_mappings(
    reservation& r, std::uintptr_t va, std::size_t bytes) {
  const auto none = std::pair{r.mappings.end(), r.mappings.end()};
  auto first = r.mappings.find(va);
  if (first == r.mappings.end()) return none;
  std::uintptr_t end = va;
  auto it = first;
  while (it != r.mappings.end() && it->first == end && end < va + bytes) {
    end += it->second.bytes;
    ++it;
  }
  if (end != va + bytes) return none;
  return {first, it};
}

void sim_memory::drop_mapping_ref(std::uint64_t run_id) {
  auto it = runs_.find(run_id);
  if (--it->second.mappings == 0 && it->second.released) {
    free_slice(it->second.file_offset, it->second.bytes);
    runs_.erase(it);
  }
}

void sim_memory::free_slice(std::uint64_t offset, std::size_t bytes) {
  // Best effort: a failed punch only keeps host memory committed.
  if (fd_ >= 0) {
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(bytes));
  }
  used_ -= bytes;
  slices_.give(offset, bytes);
}

}  // namespace strata
