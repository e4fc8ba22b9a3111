#include "plan/step_run.hpp"

#include <vector>

#include "pytorch_model/pytorch_allocator.hpp"
#include "strata/strata.hpp"

namespace strata::plan {

std::uint64_t plan_page_bytes(std::uint64_t gpu_memory) {
  // The allocator's bookkeeping of a stitched block is per page: a step of
  // multi-GiB tensors on a 1 TiB GPU took 79 s to plan at 2 MiB (8 s at
  // 16 MiB, its peak 0.01% apart; a small step's peak is up to 2% higher in
  // the larger pages).
  std::uint64_t granularity = 2ULL << 20;
  while ((gpu_memory >> 16) > granularity) granularity *= 2;
  return granularity;
}

result<step_memory> run_step(const plan_setup& s, const step_schedule& schedule, const char* data) {
  const std::uint64_t granularity = plan_page_bytes(s.gpu_memory);
  step_memory m;
  m.usable = (s.gpu_memory - s.context_memory) / granularity * granularity;
  allocator_options o;
  o.device = "sim:capacity=" + format_byte_option(m.usable) +
             ",granularity=" + format_byte_option(granularity) + ",data=" + data;
  o.log_ooms = false;
  std::unique_ptr<allocator> alloc;
  try {
    alloc = std::make_unique<allocator>(o);
  } catch (const error& e) {
    return e.to_status();
  }
  std::vector<void*> ptrs(schedule.tensors, nullptr);
  std::vector<std::uint64_t> bytes(schedule.tensors, 0);
  std::vector<category> kinds(schedule.tensors, category::activations);
  std::uint64_t live[category_count] = {};
  std::uint64_t live_total = 0;
  std::size_t phase = 0;
  for (const step_event& e : schedule.events) {
    if (e.what == step_event::kind::phase) {
      phase = e.id;
      continue;
    }
    if (e.what == step_event::kind::free) {
      if (auto f = alloc->try_free_async(ptrs[e.id], nullptr); !f) return f;
      live[static_cast<std::size_t>(kinds[e.id])] -= bytes[e.id];
      live_total -= bytes[e.id];
      continue;
    }
    ++m.allocations;
    auto p = alloc->try_malloc(e.bytes);
    if (!p && p.code() == errc::out_of_memory) {
      m.fits = false;
      m.failed_phase = schedule.phases[phase];
      m.failed_bytes = e.bytes;
      try {
        m.free_at_failure = alloc->available_memory().free;
      } catch (const error& e) {
        return e.to_status();
      }
      for (std::size_t c = 0; c < category_count; ++c) m.by_category[c] = live[c];
      m.by_category[static_cast<std::size_t>(e.of)] += e.bytes;  // what it would have held
      break;
    }
    if (!p) return p.error();
    ptrs[e.id] = *p;
    bytes[e.id] = e.bytes;
    kinds[e.id] = e.of;
    live[static_cast<std::size_t>(e.of)] += e.bytes;
    live_total += e.bytes;
    if (live_total > m.peak_tensors) {
      m.peak_tensors = live_total;
      for (std::size_t c = 0; c < category_count; ++c) m.by_category[c] = live[c];
    }
  }
  m.peak_reserved = static_cast<std::uint64_t>(alloc->counters().reserved_bytes[pool_all].peak);
  return m;
}

pytorch_reserve pytorch_peak_reserved(const step_schedule& schedule) {
  pytorch_reserve r;
  for (const auto m :
       {pytorch_allocator_model::mode::native, pytorch_allocator_model::mode::expandable}) {
    pytorch_allocator_model model(m);
    constexpr std::uint32_t none = UINT32_MAX;  // a tensor of 0 bytes has no block
    std::vector<std::uint32_t> handles(schedule.tensors, none);
    for (const step_event& e : schedule.events) {
      if (e.what == step_event::kind::alloc && e.bytes > 0) {
        handles[e.id] = model.allocate(e.bytes);
      } else if (e.what == step_event::kind::free && handles[e.id] != none) {
        model.free(handles[e.id]);
        handles[e.id] = none;
      }
    }
    (m == pytorch_allocator_model::mode::native ? r.native : r.expandable) = model.peak_reserved();
  }
  return r;
}

}  // namespace strata::plan
