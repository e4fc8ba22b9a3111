// The cost of the event trace. Names:
//   trace/record             one event_trace::record() call (target <= 50 ns)
//   trace/pair_off/<bytes>   alloc+free pair, trace off (the fast path)
//   trace/pair_on/<bytes>    alloc+free pair, trace on (locked path, three events per pair)
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
BENCHMARK_MAIN();
