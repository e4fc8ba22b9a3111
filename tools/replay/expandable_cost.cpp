#include "expandable_cost.hpp"

#include <cstdint>

#include "strata/device.hpp"

namespace strata::replay {

result<double> expandable_map_ms(const std::string& spec,
                                 const std::vector<pytorch_allocator_model::growth>& growths) {
  auto opened = open_device(spec);
  if (!opened) return opened.error();
  device& dev = **opened;
  std::uint64_t total = 0;
  for (const auto& g : growths) {
    if (g.page == 0 || g.page % dev.granularity() != 0 || g.bytes % g.page != 0) {
      return status{errc::invalid_argument, "an expandable segment's page of " +
                                                std::to_string(g.page) +
                                                " bytes is not whole pages of the device's " +
                                                std::to_string(dev.granularity())};
    }
    total += g.bytes;
  }
  if (total == 0) return 0.0;
  auto base = dev.reserve(total);
  if (!base) return base.error();
  std::vector<page_run> runs;
  std::uintptr_t va = *base;  // the end of what is mapped
  // Gives back what was made (a scratch device: what that fails to undo
  // goes with the device) and returns `s`.
  const auto undo = [&](const status& s) -> status {
    if (va > *base) (void)dev.unmap(*base, va - *base);
    for (const page_run& r : runs) (void)dev.release_pages(r);
    (void)dev.free_reservation(*base, total);
    return s;
  };
  // Between these two readings only create_pages, map and set_access run.
  const driver_call_total before = memory_call_total(dev.call_totals());
  for (const auto& g : growths) {
    const std::uintptr_t start = va;
    for (std::uint64_t off = 0; off < g.bytes; off += g.page) {
      auto run = dev.create_pages(g.page);
      if (!run) return undo(run.error());
      runs.push_back(*run);
      if (auto s = dev.map(va, g.page, *run); !s) return undo(s);
      va += g.page;
    }
    if (auto s = dev.set_access(start, g.bytes); !s) return undo(s);
  }
  const driver_call_total after = memory_call_total(dev.call_totals());
  (void)undo({});
  return static_cast<double>(after.ns - before.ns) * 1e-6;
}

}  // namespace strata::replay
