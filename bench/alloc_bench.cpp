// alloc+free pair of a cached block: Strata against glibc malloc and
// jemalloc, same sizes, same binary. Names: pair/<allocator>/<bytes>.
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
