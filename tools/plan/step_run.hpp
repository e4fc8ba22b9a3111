// Runs a step schedule through Strata's caching allocator on a sim device
// of the GPU's usable size (timing only, `data=none`, unless `data` says
// `host`; 2 MiB pages, larger on a GPU over 128 GiB: at most 65536), and
// measures what the allocator held.
//
// Thread safety: each call makes its own allocator; calls may run
// concurrently.
#pragma once

#include <cstdint>
#include <string>

#include "plan/step_schedule.hpp"

namespace strata::plan {

struct step_memory {
  bool fits = true;
  std::uint64_t usable = 0;         ///< the allocator's device: GPU memory less the context
  std::uint64_t peak_reserved = 0;  ///< the allocator's reserved bytes, at their peak
  std::uint64_t peak_tensors = 0;   ///< the tensors' bytes, at their peak
  /// The tensors live at that peak (or at the failed request), by category.
  std::uint64_t by_category[category_count] = {};
  // When it does not fit: where, what was asked, and what was free then.
  std::string failed_phase;
  std::uint64_t failed_bytes = 0;
  std::uint64_t free_at_failure = 0;
  std::uint64_t allocations = 0;  ///< requests made
};

/// The page size of the sim devices a plan runs its steps on for a GPU of
/// `gpu_memory` bytes: 2 MiB, or for a GPU over 128 GiB larger, keeping
/// 65536 pages at most (the allocator's bookkeeping and the time it takes
/// grow with the pages). Thread safety: pure.
std::uint64_t plan_page_bytes(std::uint64_t gpu_memory);

/// Errors: the device's and the allocator's, other than out_of_memory
/// (which is an outcome: fits = false).
result<step_memory> run_step(const plan_setup& s, const step_schedule& schedule,
                             const char* data = "none");

/// What PyTorch's own caching allocator would reserve at the schedule's
/// peak (pytorch_allocator.hpp): the default one, and with expandable
/// segments. Neither gives memory back, so a figure above the GPU's usable
/// memory is an out-of-memory error there.
struct pytorch_reserve {
  std::uint64_t native = 0;
  std::uint64_t expandable = 0;
};
pytorch_reserve pytorch_peak_reserved(const step_schedule& schedule);

}  // namespace strata::plan
