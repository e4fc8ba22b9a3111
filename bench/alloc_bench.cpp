// alloc+free pair of a cached block: Strata against glibc malloc and
// jemalloc, same sizes, same binary. Names: pair/<allocator>/<bytes>.
// And pairs that cycle through N large sizes (mixed/<allocator>/<N>):
// training asks for many sizes in turn, where one size at a time measures
// only the best case (Strata's per-thread large slot holds one block).
//
//   build/default/bench/alloc_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>
#include <jemalloc/jemalloc.h>

#include <array>
#include <memory>

#include "strata/strata.hpp"

extern "C" void* __libc_malloc(std::size_t);  // NOLINT(bugprone-reserved-identifier)
extern "C" void __libc_free(void*);           // NOLINT(bugprone-reserved-identifier)

namespace {

constexpr std::array<std::int64_t, 5> sizes{512, 65536, 1 << 20, 16 << 20, 256 << 20};

struct strata_fixture {
  strata::allocator alloc = strata::allocator::from_conf("device:sim:capacity=80GiB");
  std::array<void*, 2> streams{};
  strata_fixture() {
    streams[0] = alloc.dev().create_stream()->native;
    streams[1] = alloc.dev().create_stream()->native;
  }
};

strata_fixture& fixture() {
  static strata_fixture f;
  return f;
}

void pair_strata(benchmark::State& state) {
  auto& f = fixture();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  void* stream = f.streams[static_cast<std::size_t>(state.thread_index()) % 2];
  // Warm the cache: the first pair maps pages; every later one reuses them.
  auto warm = f.alloc.try_malloc_async(bytes, stream);
  if (!warm || !f.alloc.try_free_async(*warm, stream)) {
    state.SkipWithError("strata: warm-up allocation failed");
    return;
  }
  for (auto _ : state) {
    auto p = f.alloc.try_malloc_async(bytes, stream);
    benchmark::DoNotOptimize(p.value());
    (void)f.alloc.try_free_async(p.value(), stream);
  }
}

// The large sizes mixed/ cycles through (its argument: how many of them).
constexpr std::array<std::size_t, 4> cycle{1 << 20, 8 << 20, 24 << 20, 72 << 20};

// How many of `cycle` the benchmark's argument asks for; 0 (the benchmark
// skipped, saying why) unless 1 to cycle.size().
std::size_t sizes_cycled(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  if (n == 0 || n > cycle.size()) {
    state.SkipWithError("mixed: the argument is how many sizes to cycle through, 1 to 4");
    return 0;
  }
  return n;
}

void mixed_strata(benchmark::State& state) {
  auto& f = fixture();
  const std::size_t n = sizes_cycled(state);
  if (n == 0) return;
  for (std::size_t k = 0; k < n; ++k) {  // every size's pages mapped once
    auto warm = f.alloc.try_malloc_async(cycle[k], f.streams[0]);
    if (!warm || !f.alloc.try_free_async(*warm, f.streams[0])) {
      state.SkipWithError("strata: warm-up allocation failed");
      return;
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto p = f.alloc.try_malloc_async(cycle[i++ % n], f.streams[0]);
    benchmark::DoNotOptimize(p.value());
    (void)f.alloc.try_free_async(p.value(), f.streams[0]);
  }
}

template <void* (*Alloc)(std::size_t), void (*Free)(void*, std::size_t)>
void mixed_host(benchmark::State& state) {
  const std::size_t n = sizes_cycled(state);
  if (n == 0) return;
  std::size_t i = 0;
  for (auto _ : state) {
    const std::size_t bytes = cycle[i++ % n];
    void* p = Alloc(bytes);
    benchmark::DoNotOptimize(p);
    Free(p, bytes);
  }
}

void* glibc_alloc(std::size_t bytes) {
  return __libc_malloc(bytes);
}
void glibc_free(void* p, std::size_t /*bytes*/) {
  __libc_free(p);
}
void* jemalloc_alloc(std::size_t bytes) {
  return mallocx(bytes, 0);
}
void jemalloc_free(void* p, std::size_t bytes) {
  sdallocx(p, bytes, 0);
}

void pair_glibc(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = __libc_malloc(bytes);
    benchmark::DoNotOptimize(p);
    __libc_free(p);
  }
}

void pair_jemalloc(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = mallocx(bytes, 0);
    benchmark::DoNotOptimize(p);
    sdallocx(p, bytes, 0);
  }
}

void register_all() {
  for (auto [name, fn] :
       {std::pair{"pair/strata", &pair_strata}, std::pair{"pair/glibc", &pair_glibc},
        std::pair{"pair/jemalloc", &pair_jemalloc}}) {
    for (auto size : sizes) {
      benchmark::RegisterBenchmark(name, fn)->Arg(size)->Threads(1)->Threads(2)->UseRealTime();
    }
  }
  for (auto [name, fn] :
       {std::pair{"mixed/strata", &mixed_strata},
        std::pair{"mixed/glibc", &mixed_host<glibc_alloc, glibc_free>},
        std::pair{"mixed/jemalloc", &mixed_host<jemalloc_alloc, jemalloc_free>}}) {
    benchmark::RegisterBenchmark(name, fn)->Arg(1)->Arg(2)->Arg(4)->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
