// The host kernels against the machine's memory bandwidth and PyTorch.
//
//   scripts/bench-kernels        (installs python3-torch, builds, runs)
//   build/default/bench/kernels_bench [--threads N] [google-benchmark flags]
//
// In one run: Strata's host Adam step, cast-copy and pack/unpack; a
// STREAM-style triad (a = b + s * c) over the same pool of threads, the
// bandwidth figure everything is compared with; and PyTorch's CPU
// torch.optim.Adam on the same sizes (bench/torch_adam.py, foreach off and
// on). Bytes counted per element: Adam 28 (read p, g, m, v; write p, m, v),
// triad 12, cast f32->bf16 6, pack 8 (read and write each fp32).
// Closing lines, one per size:
//   adam vs torch: X; adam vs triad bandwidth: Y
// X = the faster PyTorch mode's time / Strata's; Y = Adam's bytes per second
// / the triad's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/kernels.hpp"

namespace {

unsigned threads = 0;  // 0: one per hardware thread
constexpr std::int64_t sizes[] = {16 << 20, 64 << 20, 256 << 20};

strata::kernel_pool& pool() {
  static const std::unique_ptr<strata::kernel_pool> p =
      std::move(*strata::kernel_pool::create(threads));
  return *p;
}

// Parallel first touch, so pages spread as the kernels will use them.
std::vector<float> filled(std::size_t n, float v) {
  std::vector<float> out(n);
  struct job {
    float* p;
    float v;
  } j{out.data(), v};
  pool().parallel_for(
      n, 1 << 16,
      [](void* c, std::size_t b, std::size_t e) {
        auto& jj = *static_cast<job*>(c);
        std::fill(jj.p + b, jj.p + e, jj.v);
      },
      &j);
  return out;
}

void adam(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = filled(n, 1.0F);
  auto g = filled(n, 0.01F);
  auto m = filled(n, 0.0F);
  auto v = filled(n, 0.0F);
  strata::adam_tensors t{p.data(), g.data(), strata::dtype::f32,  m.data(), v.data(),
                         nullptr,  nullptr,  strata::dtype::bf16, n};
  std::uint64_t step = 1;
  for (auto _ : state) {
    if (!strata::adam_step_host(pool(), t, {}, step++).ok()) state.SkipWithError("adam failed");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 28);
}

void triad(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto a = filled(n, 0.0F);
  auto b = filled(n, 1.0F);
  auto c = filled(n, 2.0F);
  struct job {
    float* a;
    const float* b;
    const float* c;
  } j{a.data(), b.data(), c.data()};
  for (auto _ : state) {
    pool().parallel_for(
        n, 1 << 16,
        [](void* ctx, std::size_t lo, std::size_t hi) {
          auto& jj = *static_cast<job*>(ctx);
          float* __restrict out = jj.a;
          for (std::size_t i = lo; i < hi; ++i) out[i] = jj.b[i] + 3.0F * jj.c[i];
        },
        &j);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 12);
}

void cast_to_bf16(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto in = filled(n, 1.5F);
  std::vector<std::uint16_t> out(n);
  for (auto _ : state) {
    (void)strata::cast_copy_host(pool(), out.data(), strata::dtype::bf16, in.data(),
                                 strata::dtype::f32, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 6);
}

// Packs (or, with `unpack`, unpacks) 64 tensors of `n` floats in all.
void pack_or_unpack(benchmark::State& state, bool unpack) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto src = filled(n, 1.0F);
  auto flat = filled(n, 0.0F);
  // 64 tensors of uneven sizes, the shape of a gradient bucket.
  std::vector<strata::pack_entry> entries;
  std::size_t at = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t len = i == 63 ? n - at : n / 96 + (i % 3) * (n / 192);
    entries.push_back({src.data() + at, len * 4, at * 4});
    at += len;
  }
  for (auto _ : state) {
    const auto done =
        unpack ? strata::unpack_host(pool(), entries.data(), entries.size(), flat.data(), n * 4)
               : strata::pack_host(pool(), entries.data(), entries.size(), flat.data(), n * 4);
    if (!done.ok()) state.SkipWithError("pack failed");
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 8);
}

void pack(benchmark::State& state) {
  pack_or_unpack(state, false);
}

void unpack(benchmark::State& state) {
  pack_or_unpack(state, true);
}

// Records each benchmark's bytes per second while printing as usual.
class recording_reporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> bytes_per_second;
  std::map<std::string, double> seconds;
  // "adam/strata/16777216/min_time:1.000/real_time" -> "adam/strata/16777216".
  static std::string key(const std::string& name) {
    const auto at = name.find("/min_time:");
    return at == std::string::npos ? name : name.substr(0, at);
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string name = key(r.benchmark_name());
      if (auto it = r.counters.find("bytes_per_second"); it != r.counters.end()) {
        bytes_per_second[name] = it->second.value;
      }
      seconds[name] = r.GetAdjustedRealTime() / 1e9;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// PyTorch's fastest step per size (foreach off or on), from torch_adam.py
// run with `env` prepended; empty when python3-torch is missing.
std::map<std::int64_t, double> torch_times(unsigned n_threads, const std::string& env) {
  std::map<std::int64_t, double> best;
  std::string cmd = env + " /usr/bin/python3 " + STRATA_SOURCE_DIR + "/bench/torch_adam.py " +
                    std::to_string(n_threads);
  for (auto s : sizes) cmd += " " + std::to_string(s);
  cmd += " 2>/dev/null";
  FILE* in = popen(cmd.c_str(), "r");  // NOLINT(cert-env33-c): the benchmark's own driver
  if (in == nullptr) return best;
  char line[256];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    long long n = 0;
    double secs = 0;
    const char* at_n = std::strstr(line, "\"n\": ");
    const char* at_s = std::strstr(line, "\"seconds\": ");
    if (at_n == nullptr || at_s == nullptr) continue;
    n = std::atoll(at_n + 5);
    secs = std::atof(at_s + 11);
    auto [it, fresh] = best.emplace(n, secs);
    if (!fresh) it->second = std::min(it->second, secs);
  }
  pclose(in);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--threads")
      threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  benchmark::Initialize(&argc, argv);
  for (auto s : sizes) {
    benchmark::RegisterBenchmark("adam/strata", adam)->Arg(s)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("triad", triad)->Arg(s)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("cast/f32_to_bf16", cast_to_bf16)
        ->Arg(s)
        ->UseRealTime()
        ->MinTime(1.0);
    benchmark::RegisterBenchmark("pack", pack)->Arg(s)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("unpack", unpack)->Arg(s)->UseRealTime()->MinTime(1.0);
  }
  recording_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const unsigned n_threads = pool().threads();
  // As Debian ships it, PyTorch's Adam frees its temporaries every step,
  // and glibc returns blocks of 32 MiB and more to the system: from 16M
  // parameters each step faults its temporaries in again. Kept in glibc's
  // heap instead (the tunables below; not the default), it runs at memory
  // speed. Both are reported.
  const auto torch = torch_times(n_threads, "");
  const auto torch_kept = torch_times(
      n_threads,
      "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold="
      "17179869184");
  std::printf("\nthreads: %u\n", n_threads);
  for (auto s : sizes) {
    const std::string arg = "/" + std::to_string(s);
    const double triad_bw = reporter.bytes_per_second["triad" + arg];
    const double adam_bw = reporter.bytes_per_second["adam/strata" + arg];
    const double adam_s = reporter.seconds["adam/strata" + arg];
    if (triad_bw == 0 || adam_bw == 0) continue;
    std::printf(
        "%lld params: cast vs triad bandwidth: %.2f; pack: %.2f; unpack: %.2f (triad %.1f GB/s)\n",
        static_cast<long long>(s), reporter.bytes_per_second["cast/f32_to_bf16" + arg] / triad_bw,
        reporter.bytes_per_second["pack" + arg] / triad_bw,
        reporter.bytes_per_second["unpack" + arg] / triad_bw, triad_bw / 1e9);
    if (auto it = torch.find(s); it != torch.end()) {
      std::printf("%lld params: adam vs torch: %.2f; adam vs triad bandwidth: %.2f\n",
                  static_cast<long long>(s), it->second / adam_s, adam_bw / triad_bw);
      if (auto kept = torch_kept.find(s); kept != torch_kept.end()) {
        std::printf("%lld params: adam vs torch with its temporaries kept in the heap: %.2f\n",
                    static_cast<long long>(s), kept->second / adam_s);
      }
    } else {
      std::printf(
          "%lld params: adam vs torch: n/a (python3-torch missing); adam vs triad "
          "bandwidth: %.2f\n",
          static_cast<long long>(s), adam_bw / triad_bw);
    }
  }
  benchmark::Shutdown();
  return 0;
}
