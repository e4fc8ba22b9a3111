// Physical and virtual memory of the simulated GPU.
//
// Physical memory is one memfd; a page run is a slice of it. Mapping is
// mmap(MAP_SHARED | MAP_FIXED) of the slice into a reservation, so a slice
// mapped at two addresses shows the same bytes, as VMM aliasing does on a
// GPU. Reservations are PROT_NONE anonymous mappings; unmapping puts the
// PROT_NONE placeholder back. A slice whose run is released and unmapped is
// hole-punched, so untouched and freed pages cost no host memory.
//
// Invariants (under `mu_`):
//   - `used_` = bytes of runs that are not yet both released and unmapped;
//     `used_ <= capacity_`.
//   - mappings inside one reservation never overlap; each counts once in its
//     run's `mappings`.
//   - free slices of the memfd never overlap and are coalesced (extent_space).
// Cost: every call takes `mu_` and does at most a few system calls (none
// on a timing-only device).
//
// Thread safety: every member may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "strata/device.hpp"
#include "strata/extent_space.hpp"

namespace strata {

class sim_memory {
 public:
  /// Creates the memfd; not `backed` (a timing-only device): none, and
  /// reservations, pages, mappings and access are bookkeeping only, with
  /// no system call (reservations are addresses above every user mapping:
  /// touching device memory faults, and its size costs no address space).
  /// Errors: device_error when memfd_create fails.
  static result<std::unique_ptr<sim_memory>> create(std::size_t capacity, std::size_t granularity,
                                                    bool backed = true);
  sim_memory(const sim_memory&) = delete;
  sim_memory& operator=(const sim_memory&) = delete;
  sim_memory(sim_memory&&) = delete;
  sim_memory& operator=(sim_memory&&) = delete;
  ~sim_memory();

  memory_info info();
  result<std::uintptr_t> reserve(std::size_t bytes, std::size_t alignment);
  status free_reservation(std::uintptr_t base, std::size_t bytes);
  result<page_run> create_pages(std::size_t bytes);
  status release_pages(page_run run);
  status map(std::uintptr_t va, std::size_t bytes, page_run run);
  // Each returns the number of mappings the range covered.
  result<std::size_t> unmap(std::uintptr_t va, std::size_t bytes);
  result<std::size_t> set_access(std::uintptr_t va, std::size_t bytes);

  /// invalid_argument unless [ptr, ptr+bytes) is mapped and accessible.
  status check_accessible(const void* ptr, std::size_t bytes, const char* what);

 private:
  struct run_state {
    std::uint64_t file_offset = 0;
    std::size_t bytes = 0;
    std::uint32_t mappings = 0;
    bool released = false;
  };
  struct mapping {
    std::size_t bytes = 0;
    std::uint64_t run = 0;
    bool accessible = false;
  };
  struct reservation {
    std::size_t bytes = 0;
    std::map<std::uintptr_t, mapping> mappings;  // by start address
  };
  using mapping_iter = std::map<std::uintptr_t, mapping>::iterator;

  sim_memory(int fd, std::size_t capacity, std::size_t granularity);

  // A timing-only device's reservation: address space no host mapping
  // has, not mapped at all.
  result<std::uintptr_t> reserve_unbacked(std::size_t bytes, std::size_t alignment);
  reservation* find_reservation(std::uintptr_t va, std::size_t bytes);
  // The mappings that exactly tile [va, va+bytes), or end() when they do not.
  static std::pair<mapping_iter, mapping_iter> whole_mappings(reservation& r, std::uintptr_t va,
                                                              std::size_t bytes);
  void drop_mapping_ref(std::uint64_t run_id);
  void free_slice(std::uint64_t offset, std::size_t bytes);

  std::mutex mu_;
  int fd_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::uint64_t file_size_ = 0;  // the memfd's size: at least every slice handed out
  std::uint64_t next_run_id_ = 1;
  extent_space slices_;  // the memfd's slices: free ones first fit, merged
  std::unordered_map<std::uint64_t, run_state> runs_;
  std::map<std::uintptr_t, reservation> reservations_;  // by base address
};

}  // namespace strata
