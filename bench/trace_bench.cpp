// The cost of the event trace. Names:
//   trace/record             one event_trace::record() call (target <= 50 ns)
//   trace/pair_off/<bytes>   alloc+free pair, trace off (the fast path)
//   trace/pair_on/<bytes>    alloc+free pair, trace on (locked path, three events per pair)
//   trace/record_frames/<N>  one record() capturing N native frames (trace_frames:N)
//   trace/pair_frames/<N>    alloc+free pair of 4 KiB, trace on with N frames per event
//   trace/export_frames/<N>  snapshot_pickle() of 1000 pairs with N frames each,
//                            symbolized (per export, in microseconds)
//
//   build/default/bench/trace_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <memory>

#include "caching_allocator.hpp"
#include "event_trace.hpp"

namespace {

void trace_record(benchmark::State& state) {
  strata::event_trace trace(1 << 16);
  std::uintptr_t addr = 0x7f0000000000;
  for (auto _ : state) {
    trace.record(strata::trace_action::alloc, addr, 4096, nullptr);
    addr += 512;
  }
  benchmark::DoNotOptimize(trace.recorded());
}

void trace_record_frames(benchmark::State& state) {
  strata::event_trace trace(1 << 16, static_cast<std::size_t>(state.range(0)));
  std::uintptr_t addr = 0x7f0000000000;
  for (auto _ : state) {
    trace.record(strata::trace_action::alloc, addr, 4096, nullptr);
    addr += 512;
  }
  benchmark::DoNotOptimize(trace.recorded());
}

std::unique_ptr<strata::caching_allocator> traced(std::uint64_t trace_buffer,
                                                  std::uint64_t frames) {
  strata::allocator_options o;
  o.trace_buffer = trace_buffer;
  o.trace_frames = frames;
  auto dev = strata::open_device("sim:capacity=80GiB");
  return std::move(*strata::caching_allocator::create(std::move(*dev), o));
}

void trace_pair_frames(benchmark::State& state) {
  auto alloc = traced(1 << 16, static_cast<std::uint64_t>(state.range(0)));
  (void)alloc->free_async(*alloc->malloc_async(4096, nullptr), nullptr);  // warm-up
  for (auto _ : state) {
    void* p = *alloc->malloc_async(4096, nullptr);
    benchmark::DoNotOptimize(p);
    (void)alloc->free_async(p, nullptr);
  }
}

void trace_export_frames(benchmark::State& state) {
  auto alloc = traced(4096, static_cast<std::uint64_t>(state.range(0)));
  for (int i = 0; i < 1000; ++i) {
    (void)alloc->free_async(*alloc->malloc_async(4096, nullptr), nullptr);
  }
  for (auto _ : state) benchmark::DoNotOptimize(alloc->snapshot_pickle());
}

void trace_pair(benchmark::State& state, std::uint64_t trace_buffer) {
  strata::allocator_options o;
  o.trace_buffer = trace_buffer;
  auto dev = strata::open_device("sim:capacity=80GiB");
  auto alloc = std::move(*strata::caching_allocator::create(std::move(*dev), o));
  const auto bytes = static_cast<std::size_t>(state.range(0));
  (void)alloc->free_async(*alloc->malloc_async(bytes, nullptr), nullptr);  // warm-up
  for (auto _ : state) {
    void* p = *alloc->malloc_async(bytes, nullptr);
    benchmark::DoNotOptimize(p);
    (void)alloc->free_async(p, nullptr);
  }
}

}  // namespace

BENCHMARK(trace_record)->Name("trace/record");
BENCHMARK_CAPTURE(trace_pair, off, 0)->Name("trace/pair_off")->Arg(4096)->Arg(16 << 20);
BENCHMARK_CAPTURE(trace_pair, on, 1 << 16)->Name("trace/pair_on")->Arg(4096)->Arg(16 << 20);
BENCHMARK(trace_record_frames)->Name("trace/record_frames")->Arg(8)->Arg(32);
BENCHMARK(trace_pair_frames)->Name("trace/pair_frames")->Arg(0)->Arg(8)->Arg(32);
BENCHMARK(trace_export_frames)
    ->Name("trace/export_frames")
    ->Arg(0)
    ->Arg(8)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
