#include "strata/allocator_stats.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace strata {

namespace {

// Calls fn(name, array) for each stat array of `s` (const or not).
template <class Stats, class Fn>
void for_each_array(Stats& s, Fn fn) {
#define STRATA_VISIT_ARRAY(name, what) fn(#name, s.name);
  STRATA_ALLOCATOR_STAT_ARRAYS(STRATA_VISIT_ARRAY)
#undef STRATA_VISIT_ARRAY
}

}  // namespace

void allocator_stats::reset_peaks() noexcept {
  for_each_array(*this, [](const char* /*name*/, stat_array& a) {
    for (auto& st : a.pools) st.peak = st.current;
  });
}

std::map<std::string, std::int64_t> allocator_stats::to_map() const {
  std::map<std::string, std::int64_t> out;
  constexpr std::array<const char*, 3> pools{"all", "small_pool", "large_pool"};
  for_each_array(*this, [&](const char* name, const stat_array& a) {
    for (std::size_t p = 0; p < pools.size(); ++p) {
      const std::string prefix = std::string(name) + "." + pools[p] + ".";
      out[prefix + "current"] = a.pools[p].current;
      out[prefix + "peak"] = a.pools[p].peak;
      out[prefix + "allocated"] = a.pools[p].allocated;
      out[prefix + "freed"] = a.pools[p].freed;
    }
  });
  out.insert({STRATA_ALLOCATOR_COUNTERS(STRATA_COUNTER_ENTRY)});
  driver_call_total all;
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    const std::string name = driver_call_name(static_cast<driver_call>(k));
    out["driver_calls." + name] = static_cast<std::int64_t>(driver[k].calls);
    out["driver_time_ns." + name] = static_cast<std::int64_t>(driver[k].ns);
    all.calls += driver[k].calls;
    all.ns += driver[k].ns;
  }
  out["driver_calls.all"] = static_cast<std::int64_t>(all.calls);
  out["driver_time_ns.all"] = static_cast<std::int64_t>(all.ns);
  out["fragmentation_ppm.current"] = std::llround(fragmentation() * 1e6);
  out["fragmentation_ppm.peak"] = std::llround(peak_fragmentation() * 1e6);
  return out;
}

namespace {

double one_minus_ratio(std::int64_t allocated, std::int64_t reserved) {
  if (reserved <= 0) return 0.0;
  return std::max(0.0, 1.0 - static_cast<double>(allocated) / static_cast<double>(reserved));
}

}  // namespace

double allocator_stats::fragmentation() const noexcept {
  return one_minus_ratio(allocated_bytes[pool_all].current, reserved_bytes[pool_all].current);
}

double allocator_stats::peak_fragmentation() const noexcept {
  return one_minus_ratio(allocated_bytes[pool_all].peak, reserved_bytes[pool_all].peak);
}

}  // namespace strata
