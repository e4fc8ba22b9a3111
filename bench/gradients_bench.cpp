// Gradient reduction overlapped with backward (docs/gradients.md): N local
// ranks on sim devices, each running a backward pass over L layers in
// reverse order, each layer a stream-ordered compute delay C that produces
// a gradient of G bytes, marked ready on the compute stream. The link is
// modeled so that all-reducing one layer's gradient takes C / ratio, plus a
// latency of 20 us per collective.
// Three policies:
//   one-shot   one bucket for every gradient, reduced after backward
//   ddp        DDP's buckets: 1 MiB first, 25 MiB after, copied into
//              staging buffers (buckets_inflight 2), rebuilt after step 1
//   strata     buckets as gradient views (no copy), one layer each,
//              rebuilt after step 1
// Each step's time is divided by the bound
//   max(L C, L T) + T,   T: one layer's reduction time
// (compute and reduction fully overlapped, then the last layer's reduction).
// "extra MiB" is device memory beyond the gradient buffer (staging);
// "copied MiB" is the bytes packed into staging per step. Closing line:
//   gradients overlap: step / bound R, extra bytes E MiB
// for Strata's worst step from the second on, at every ratio.
//
//   gradients_bench [--ranks 4] [--layers 16] [--grad 1MiB] [--compute-ms 10] [--steps 4]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "command_line.hpp"
#include "exit_on_error.hpp"
#include "strata/gradient_buckets.hpp"
#include "strata/option_table.hpp"
#include "strata/strata.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  int ranks = 4;
  int layers = 16;
  std::uint64_t grad = 1ULL << 20;
  double compute_ms = 10;
  int steps = 4;
};

enum class policy { one_shot, ddp, strata };

const char* name_of(policy p) {
  return p == policy::one_shot ? "one-shot" : p == policy::ddp ? "ddp" : "strata";
}

using bench::check;
using bench::die;
using bench::option_pairs;
using bench::real_number;
using bench::take;
using bench::unknown_option;
using bench::whole_number;

void sleep_for(void* arg) {
  std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(arg)));
}

strata::bucket_options options_of(policy p, std::uint64_t grad, std::uint64_t total) {
  strata::bucket_options o;
  o.op = strata::reduce_op::avg;
  if (p == policy::one_shot) {
    o.first_bucket_bytes = total;
    o.bucket_bytes = total;
    o.rebuild = false;
  } else if (p == policy::ddp) {
    o.gradient_as_bucket_view = false;  // DDP's default: copy into buckets
  } else {
    o.first_bucket_bytes = grad;
    o.bucket_bytes = grad;
  }
  return o;
}

struct outcome {
  std::vector<double> step_seconds;
  std::size_t extra_bytes = 0;
  std::uint64_t copied_per_step = 0;
  std::size_t buckets = 0;
};

outcome run(const settings& st, policy p, double link_gbps) {
  const std::size_t count = st.grad / sizeof(float);
  const std::vector<strata::gradient_param> params(static_cast<std::size_t>(st.layers),
                                                   {count, strata::dtype::f32});
  std::vector<std::unique_ptr<strata::allocator>> allocs;
  std::vector<strata::device*> devices;
  for (int r = 0; r < st.ranks; ++r) {
    strata::allocator_options ao;
    ao.device = "sim:capacity=1GiB";
    allocs.push_back(std::make_unique<strata::allocator>(ao));
    devices.push_back(&allocs.back()->dev());
  }
  strata::local_comm_options co;
  co.link_gbps = link_gbps;
  co.latency_us = 20;
  auto comms = take(strata::create_local_communicators(devices, co), "communicators");
  struct rank_state {
    strata::stream_handle compute, comm;
    std::unique_ptr<strata::gradient_buckets> buckets;
  };
  std::vector<rank_state> ranks(static_cast<std::size_t>(st.ranks));
  const auto opts = options_of(p, st.grad, st.grad * static_cast<std::uint64_t>(st.layers));
  for (int r = 0; r < st.ranks; ++r) {
    auto& rs = ranks[static_cast<std::size_t>(r)];
    rs.compute = take(devices[static_cast<std::size_t>(r)]->create_stream(), "stream");
    rs.comm = take(devices[static_cast<std::size_t>(r)]->create_stream(), "stream");
    rs.buckets = take(strata::gradient_buckets::create(*comms[static_cast<std::size_t>(r)], params,
                                                       rs.comm, opts),
                      "buckets");
  }
  double delay = st.compute_ms / 1e3;
  outcome out;
  std::barrier sync(st.ranks);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(st.ranks));
  for (int r = 0; r < st.ranks; ++r) {
    threads.emplace_back([&, r] {
      auto& rs = ranks[static_cast<std::size_t>(r)];
      strata::device& dev = *devices[static_cast<std::size_t>(r)];
      for (int s = 0; s <= st.steps; ++s) {  // step 0: the warm-up that rebuilds
        check(rs.buckets->zero(rs.compute), "zero");
        check(dev.synchronize_stream(rs.compute), "sync");
        sync.arrive_and_wait();
        const auto t0 = clock_type::now();
        for (int l = st.layers - 1; l >= 0; --l) {
          check(dev.launch_host_fn(rs.compute, sleep_for, &delay), "compute");
          check(rs.buckets->mark_ready(static_cast<std::size_t>(l), rs.compute), "mark_ready");
        }
        check(rs.buckets->finish(rs.compute), "finish");
        check(dev.synchronize_stream(rs.compute), "sync");
        const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        sync.arrive_and_wait();
        if (r == 0 && s > 0) out.step_seconds.push_back(seconds);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto c = ranks[0].buckets->stats();
  out.extra_bytes = c.staging_bytes;
  out.copied_per_step = c.bytes_copied / static_cast<std::uint64_t>(st.steps + 1);
  out.buckets = c.buckets;
  for (int r = 0; r < st.ranks; ++r) {
    auto& rs = ranks[static_cast<std::size_t>(r)];
    rs.buckets.reset();
    check(devices[static_cast<std::size_t>(r)]->destroy_stream(rs.compute), "destroy");
    check(devices[static_cast<std::size_t>(r)]->destroy_stream(rs.comm), "destroy");
  }
  return out;
}

constexpr const char* usage =
    "gradients_bench [--ranks 4] [--layers 16] [--grad 1MiB] [--compute-ms 10] [--steps 4]";

settings parse(int argc, char** argv) {
  settings st;
  for (const auto& [key, value] : option_pairs(argc, argv, usage)) {
    if (key == "--ranks") {
      st.ranks = static_cast<int>(whole_number(key, value, 2, 64));
    } else if (key == "--layers") {
      st.layers = static_cast<int>(whole_number(key, value, 2, 4096));
    } else if (key == "--grad") {
      st.grad = take(strata::parse_byte_size("--grad", value), "--grad");
      if (st.grad < 1024 || st.grad > (1ULL << 30)) die("--grad must be 1KiB to 1GiB");
    } else if (key == "--compute-ms") {
      st.compute_ms = real_number(key, value, 0, 60'000, true);
    } else if (key == "--steps") {
      st.steps = static_cast<int>(whole_number(key, value, 2, 1000));
    } else {
      unknown_option(key, usage);
    }
  }
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  const settings st = parse(argc, argv);
  const double n = st.ranks;
  const double c = st.compute_ms / 1e3;
  std::printf("gradients: %d local ranks, %d layers of %.1f MiB gradients, compute %.1f ms each\n",
              st.ranks, st.layers, static_cast<double>(st.grad) / (1 << 20), st.compute_ms);
  std::printf("%-7s %-9s %8s %9s %9s %9s %8s %10s %10s\n", "C:T", "policy", "buckets", "bound ms",
              "step ms", "worst/bd", "mean/bd", "extra MiB", "copied MiB");
  double worst = 0;
  std::size_t extra = 0;
  for (const double ratio : {0.5, 1.0, 2.0}) {
    const double t = c / ratio;  // one layer's reduction
    const double link_gbps = 2 * (n - 1) / n * static_cast<double>(st.grad) / t / 1e9;
    const double bound = std::max(st.layers * c, st.layers * t) + t;
    for (const policy p : {policy::one_shot, policy::ddp, policy::strata}) {
      const outcome out = run(st, p, link_gbps);
      double w = 0;
      double sum = 0;
      for (std::size_t s = 1; s < out.step_seconds.size(); ++s) {
        w = std::max(w, out.step_seconds[s] / bound);
        sum += out.step_seconds[s] / bound;
      }
      const double mean = sum / static_cast<double>(out.step_seconds.size() - 1);
      if (p == policy::strata) {
        worst = std::max(worst, w);
        extra = std::max(extra, out.extra_bytes);
      }
      std::printf("%-7.2f %-9s %8zu %9.1f %9.1f %9.3f %8.3f %10.1f %10.1f\n", ratio, name_of(p),
                  out.buckets, bound * 1e3, out.step_seconds.back() * 1e3, w, mean,
                  static_cast<double>(out.extra_bytes) / (1 << 20),
                  static_cast<double>(out.copied_per_step) / (1 << 20));
    }
  }
  std::printf("\ngradients overlap: step / bound %.3f, extra bytes %.1f MiB\n", worst,
              static_cast<double>(extra) / (1 << 20));
  return 0;
}
