// RMM's random-allocations benchmark on an 80 GiB sim device: N operations;
// each allocates (probability 0.73) a uniform size up to M MiB, or frees a
// random live block. Arguments: N, M. Reports ns per operation and peaks.
//
//   build/default/bench/random_alloc_bench
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "strata/strata.hpp"

namespace {

void random_allocations(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto max_bytes = static_cast<std::size_t>(state.range(1)) << 20;
  std::int64_t peak_reserved = 0;
  std::int64_t peak_allocated = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto a = std::make_unique<strata::allocator>(
        strata::allocator::from_conf("device:sim:capacity=80GiB"));
    std::mt19937_64 rng(42);
    std::vector<void*> live;
    live.reserve(n);
    state.ResumeTiming();
    for (std::size_t i = 0; i < n; ++i) {
      if (live.empty() || std::bernoulli_distribution(0.73)(rng)) {
        auto p = a->try_malloc_async(1 + rng() % max_bytes, nullptr);
        if (p) live.push_back(*p);
      } else {
        const std::size_t k = rng() % live.size();
        (void)a->try_free_async(live[k], nullptr);
        live[k] = live.back();
        live.pop_back();
      }
    }
    state.PauseTiming();
    const strata::allocator_stats s = a->counters();
    peak_reserved = s.reserved_bytes[strata::pool_all].peak;
    peak_allocated = s.allocated_bytes[strata::pool_all].peak;
    a.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.counters["peak_reserved_MiB"] = static_cast<double>(peak_reserved) / (1 << 20);
  state.counters["peak_allocated_MiB"] = static_cast<double>(peak_allocated) / (1 << 20);
}

BENCHMARK(random_allocations)
    ->Args({10000, 1})
    ->Args({10000, 4})
    ->Args({10000, 16})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
