// The cost of the event trace. Names:
//   trace/pair_off/<bytes>   alloc+free pair, trace off (the fast path)
//   trace/pair_on/<bytes>    alloc+free pair, trace on (locked path, three events per pair)
//   trace/pair_frames/<N>    alloc+free pair of 4 KiB, trace on with N frames per event
//   trace/export_frames/<N>  snapshot_pickle() of 1000 pairs with N frames each,
//                            symbolized (per export, in microseconds)
//
//   build/default/bench/trace_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <memory>

#include "strata/strata.hpp"

namespace {

std::unique_ptr<strata::allocator> traced(std::uint64_t trace_buffer, std::uint64_t frames) {
  strata::allocator_options o;
  o.device = "sim:capacity=80GiB";
  o.trace_buffer = trace_buffer;
  o.trace_frames = frames;
  return std::make_unique<strata::allocator>(o);
}

void trace_pair_frames(benchmark::State& state) {
  auto alloc = traced(1 << 16, static_cast<std::uint64_t>(state.range(0)));
  (void)alloc->try_free_async(*alloc->try_malloc_async(4096, nullptr), nullptr);  // warm-up
  for (auto _ : state) {
    void* p = *alloc->try_malloc_async(4096, nullptr);
    benchmark::DoNotOptimize(p);
    (void)alloc->try_free_async(p, nullptr);
  }
}

void trace_export_frames(benchmark::State& state) {
  auto alloc = traced(4096, static_cast<std::uint64_t>(state.range(0)));
  for (int i = 0; i < 1000; ++i) {
    (void)alloc->try_free_async(*alloc->try_malloc_async(4096, nullptr), nullptr);
  }
  for (auto _ : state) benchmark::DoNotOptimize(alloc->snapshot_pickle());
}

void trace_pair(benchmark::State& state, std::uint64_t trace_buffer) {
  auto alloc = traced(trace_buffer, 0);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  (void)alloc->try_free_async(*alloc->try_malloc_async(bytes, nullptr), nullptr);  // warm-up
  for (auto _ : state) {
    void* p = *alloc->try_malloc_async(bytes, nullptr);
    benchmark::DoNotOptimize(p);
    (void)alloc->try_free_async(p, nullptr);
  }
}

}  // namespace

BENCHMARK_CAPTURE(trace_pair, off, 0)->Name("trace/pair_off")->Arg(4096)->Arg(16 << 20);
BENCHMARK_CAPTURE(trace_pair, on, 1 << 16)->Name("trace/pair_on")->Arg(4096)->Arg(16 << 20);
BENCHMARK(trace_pair_frames)->Name("trace/pair_frames")->Arg(0)->Arg(8)->Arg(32);
BENCHMARK(trace_export_frames)
    ->Name("trace/export_frames")
    ->Arg(0)
    ->Arg(8)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
