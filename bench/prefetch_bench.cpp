// The prefetcher on a transformer-like step (docs/prefetch.md): L layers,
// each with a parameter buffer of P bytes that does not stay on the device
// (the sim device holds `--resident` of them), acquired forward then
// backward; each layer's compute is a stream-ordered delay C on the
// compute stream. For each tier (host; NVMe when --nvme-dir is a disk
// directory, the host tier then holding `--host` parameters) and each ratio (P / bandwidth) : C
// from 0.25 to 4, three policies run S steps each:
//   none      no prefetch (prefetch_bytes 0): every fill starts at its acquire
//   fixed-2   DeepSpeed's: at each acquire, hints for the next two layers,
//             two fills in flight, counted in buffers
//   strata    the learned order and byte budgets (prefetch_bytes = 2 P)
// and each step's time is divided by the lower bound
//   max(sum C, F x P / bandwidth) + first fetch
// where F = 2 L - 2 R is the fetches the step cannot do without: of the 2 L
// accesses, the R layers resident at each turn (forward to backward, and
// backward to the next step's forward) need none; bandwidth is the sim's
// copy rate (host tier) or the slower of it and the disk's measured read
// rate (NVMe tier). Peak device bytes are printed with each row. Step 1
// (untimed) is the first touch, in which the prefetcher records the order;
// steps 2 to S + 1 are timed (their fills, hits and late ones, are printed
// with each row: 2 L - 2 R a step when the turns keep their residents),
// and the closing line is the worst strata
// step / bound among them, the first step that follows the order
// included:
//   prefetch worst step / bound: R
//
// That run lets the host queue the whole step ahead of the GPU, so a fill
// requested at its acquire still starts long before the compute reaches it
// and no prefetching looks as good as any. The offload hooks of a PyTorch
// model cannot run ahead: the host waits for each acquire's data, and for
// the layer's compute, before it goes on. So each tier is run that way too
// (host-synchronous: a stream synchronize after each acquire and each
// compute), for none and strata, and one line compares them where
// P/bw:C = 1, none's mean step over strata's:
//   prefetch none / strata, host-synchronous: R
//   prefetch strata / bound, host-synchronous: R (the worse tier's mean
//   step over the table's bound at P/bw:C = 1)
//
//   prefetch_bench [--layers 12] [--param 4MiB] [--gbps 0.5] [--steps 4]
//                  [--resident 4] [--host 4] [--nvme-dir DIR] [--per-step 1]
// (--per-step 1 prints every step's time / bound under its row)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "command_line.hpp"
#include "exit_on_error.hpp"
#include "strata/nvme_store.hpp"
#include "strata/option_table.hpp"
#include "strata/prefetcher.hpp"
#include "strata/residency.hpp"
#include "strata/strata.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  int layers = 12;
  std::uint64_t param = 4ULL << 20;
  double gbps = 0.5;
  int steps = 4;
  int resident = 4;
  int host = 4;
  std::string nvme_dir;
  bool per_step = false;
};

enum class policy { none, fixed_two, strata };

const char* name_of(policy p) {
  return p == policy::none ? "none" : p == policy::fixed_two ? "fixed-2" : "strata";
}

void sleep_for(void* arg) {
  std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(arg)));
}

using bench::check;
using bench::die;
using bench::option_pairs;
using bench::real_number;
using bench::take;
using bench::unknown_option;
using bench::whole_number;

struct outcome {
  std::vector<double> step_seconds;
  std::vector<std::uint64_t> step_nvme_writes;  // bytes written to NVMe per step
  std::int64_t peak_bytes = 0;
  // The timed steps' fills: prefetch hits, late fills, prefetches wasted.
  std::uint64_t hits = 0;
  std::uint64_t late = 0;
  std::uint64_t wasted = 0;
};

// S steps of one policy; the buffers start spilled (a warm-up pass). With
// `host_sync` the host waits for each acquire's data and each compute.
outcome run(const settings& st, policy p, double compute_seconds, bool nvme, bool host_sync) {
  strata::allocator_options ao;
  ao.device = "sim:capacity=" + std::to_string(st.param * st.resident + (2ULL << 20)) +
              ",h2d_gbps=" + std::to_string(st.gbps) + ",d2h_gbps=" + std::to_string(st.gbps);
  ao.log_ooms = false;
  strata::allocator alloc(ao);
  strata::tier_options o;
  o.host_capacity = nvme ? static_cast<std::uint64_t>(st.host) * st.param : 0;
  o.nvme_dir = nvme ? st.nvme_dir : "";
  o.host_lookahead = 4 * st.param;
  strata::prefetch_options po;
  po.prefetch_bytes = p == policy::none ? 0 : p == policy::fixed_two ? ~0ULL : 2 * st.param;
  po.prefetch_inflight = p == policy::fixed_two ? 2 : 16;
  po.device_lookahead = 2 * st.param;
  auto buffers = take(strata::residency_manager::create(alloc, o), "residency manager");
  auto fetch = take(strata::prefetcher::create(*buffers, po), "prefetcher");
  const strata::stream_handle compute = take(alloc.dev().create_stream(), "stream");
  std::vector<std::uint64_t> h;
  h.reserve(static_cast<std::size_t>(st.layers));
  for (int i = 0; i < st.layers; ++i) {
    h.push_back(take(buffers->register_buffer(st.param, strata::buffer_kind::parameter,
                                              strata::residency_policy::evictable),
                     "register"));
  }
  std::vector<int> order;
  order.reserve(2 * static_cast<std::size_t>(st.layers));
  for (int i = 0; i < st.layers; ++i) order.push_back(i);
  for (int i = st.layers - 1; i >= 0; --i) order.push_back(i);
  double delay = compute_seconds;
  const auto one_step = [&](bool timed, outcome& out) {
    const auto t0 = clock_type::now();
    const auto nvme_writes = [&] {
      const strata::residency_manager::counters c = buffers->stats();
      return c.bytes_to_nvme + c.writeback_bytes;  // spills and write-behinds
    };
    const std::uint64_t written = nvme_writes();
    if (p == policy::strata) check(fetch->begin_step(), "begin_step");
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::uint64_t handle = h[order[i]];
      (void)take(fetch->acquire(handle, compute.native, strata::access_mode::read_only), "acquire");
      if (host_sync) check(alloc.dev().synchronize_stream(compute), "wait for the data");
      if (p == policy::fixed_two) {
        for (std::size_t k = 1; k <= 2 && i + k < order.size(); ++k) {
          check(fetch->prefetch(h[order[i + k]]), "hint");
        }
      }
      check(alloc.dev().launch_host_fn(compute, sleep_for, &delay), "compute");
      if (host_sync) check(alloc.dev().synchronize_stream(compute), "wait for the compute");
      check(fetch->release(handle, compute.native), "release");
    }
    if (p == policy::strata) check(fetch->end_step(), "end_step");
    check(alloc.dev().synchronize_stream(compute), "sync");
    if (timed) {
      out.step_seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
      out.step_nvme_writes.push_back(nvme_writes() - written);
    }
  };
  outcome out;
  one_step(false, out);  // step 1, first touch: every buffer gets device memory, most spill
  alloc.reset_peak_stats();
  const strata::residency_manager::counters before = buffers->stats();
  for (int s = 0; s < st.steps; ++s) one_step(true, out);
  out.peak_bytes = alloc.stats().at("allocated_bytes.all.peak");
  const strata::residency_manager::counters after = buffers->stats();
  out.hits = after.prefetch_hits - before.prefetch_hits;
  out.late = after.late_fills - before.late_fills;
  out.wasted = after.prefetch_wasted - before.prefetch_wasted;
  fetch.reset();
  for (const auto handle : h) check(buffers->unregister(handle), "unregister");
  check(alloc.dev().destroy_stream(compute), "destroy stream");
  return out;
}

// The disk's read rate through the store (bytes/s), for the NVMe bound.
double disk_read_rate(const settings& st) {
  strata::tier_options o;
  o.nvme_dir = st.nvme_dir;
  auto store = take(strata::nvme_store::open(o), "nvme store");
  std::vector<unsigned char> bytes(st.param, 7);
  std::vector<std::uint64_t> ids;
  ids.reserve(8);
  for (int i = 0; i < 8; ++i)
    ids.push_back(take(store->write(bytes.data(), bytes.size()), "write"));
  const auto t0 = clock_type::now();
  for (const auto id : ids) check(store->read(id, bytes.data(), bytes.size()), "read");
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return static_cast<double>(st.param) * static_cast<double>(ids.size()) / seconds;
}

constexpr const char* usage =
    "prefetch_bench [--layers 12] [--param 4MiB] [--gbps 0.5] [--steps 4] [--resident 4] "
    "[--host 4] [--nvme-dir DIR] [--per-step 1]";

settings parse(int argc, char** argv) {
  settings st;
  for (const auto& [key, value] : option_pairs(argc, argv, usage)) {
    if (key == "--layers") {
      st.layers = static_cast<int>(whole_number(key, value, 5, 4096));  // 3 + 1 + 1 on NVMe
    } else if (key == "--param") {
      st.param = take(strata::parse_byte_size("--param", value), "--param");
      if (st.param < 4096 || st.param > (1ULL << 30)) die("--param must be 4KiB to 1GiB");
    } else if (key == "--gbps") {
      st.gbps = real_number(key, value, 0, 1000, true);
    } else if (key == "--steps") {
      st.steps = static_cast<int>(whole_number(key, value, 1, 1000));
    } else if (key == "--resident") {
      st.resident = static_cast<int>(whole_number(key, value, 3, 4096));
    } else if (key == "--host") {
      st.host = static_cast<int>(whole_number(key, value, 1, 4096));
    } else if (key == "--nvme-dir") {
      st.nvme_dir = value;
    } else if (key == "--per-step") {
      st.per_step = whole_number(key, value, 0, 1) != 0;
    } else {
      unknown_option(key, usage);
    }
  }
  if (st.host + st.resident >= st.layers) {
    die("need --host + --resident < --layers (some layers on NVMe): " + std::to_string(st.host) +
        " + " + std::to_string(st.resident) + " >= " + std::to_string(st.layers));
  }
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  const settings st = parse(argc, argv);
  std::vector<bool> tiers{false};
  if (!st.nvme_dir.empty()) tiers.push_back(true);
  double worst = 0;
  for (const bool nvme : tiers) {
    const double copy_rate = st.gbps * 1e9;
    const double disk_rate = nvme ? disk_read_rate(st) : 0;
    const double rate = nvme ? std::min(copy_rate, disk_rate) : copy_rate;
    const double fetch = static_cast<double>(st.param) / rate;
    const double first =
        nvme ? static_cast<double>(st.param) / disk_rate + static_cast<double>(st.param) / copy_rate
             : fetch;
    std::printf(
        "\n%s tier: %d layers of %.0f MiB, forward then backward, copies %.1f GB/s%s\n",
        nvme ? "NVMe" : "host", st.layers, static_cast<double>(st.param) / (1 << 20), st.gbps,
        nvme ? (", disk reads " + std::to_string(disk_rate / 1e9).substr(0, 4) + " GB/s").c_str()
             : "");
    std::printf("%-8s %-8s %9s %9s %9s %9s %9s %6s %6s %7s\n", "P/bw:C", "policy", "bound ms",
                "step 2", "worst", "mean", "peak MiB", "hits", "late", "wasted");
    for (const double ratio : {0.25, 0.5, 1.0, 2.0, 4.0}) {
      const double c = fetch / ratio;
      const double accesses = 2.0 * st.layers;
      const double fetches = accesses - 2.0 * st.resident;
      const double bound = std::max(accesses * c, fetches * fetch) + first;
      for (const policy p : {policy::none, policy::fixed_two, policy::strata}) {
        const outcome out = run(st, p, c, nvme, false);
        double worst_step = 0;
        double sum_steps = 0;
        for (const double seconds : out.step_seconds) {
          worst_step = std::max(worst_step, seconds / bound);
          sum_steps += seconds / bound;
        }
        if (p == policy::strata) worst = std::max(worst, worst_step);
        std::printf("%-8.2f %-8s %9.2f %9.3f %9.3f %9.3f %9.1f %6llu %6llu %7llu\n", ratio,
                    name_of(p), bound * 1e3, out.step_seconds[0] / bound, worst_step,
                    sum_steps / static_cast<double>(out.step_seconds.size()),
                    static_cast<double>(out.peak_bytes) / (1 << 20),
                    static_cast<unsigned long long>(out.hits),
                    static_cast<unsigned long long>(out.late),
                    static_cast<unsigned long long>(out.wasted));
        if (st.per_step) {
          std::printf("         steps 2.. / bound:");
          for (const double t : out.step_seconds) std::printf(" %.3f", t / bound);
          std::printf("\n         MiB written to NVMe:");
          for (const auto b : out.step_nvme_writes)
            std::printf(" %.0f", static_cast<double>(b) / (1 << 20));
          std::printf("\n");
        }
      }
    }
  }
  // Host-synchronous, where P/bw:C = 1: what prefetching is for.
  double sync_ratio = 0;
  double sync_bound = 0;
  for (const bool nvme : tiers) {
    const double copy_rate = st.gbps * 1e9;
    const double disk_rate = nvme ? disk_read_rate(st) : 0;
    const double rate = nvme ? std::min(copy_rate, disk_rate) : copy_rate;
    const double c = static_cast<double>(st.param) / rate;
    // The table's bound where compute and fetch take the same time: every
    // access's compute, plus the first fetch.
    const double first =
        nvme ? static_cast<double>(st.param) / disk_rate + static_cast<double>(st.param) / copy_rate
             : c;
    const double bound = 2.0 * st.layers * c + first;
    const auto mean = [](const outcome& o) {
      double sum = 0;
      for (const double t : o.step_seconds) sum += t;
      return sum / static_cast<double>(o.step_seconds.size());
    };
    const double none = mean(run(st, policy::none, c, nvme, true));
    const double strata = mean(run(st, policy::strata, c, nvme, true));
    std::printf(
        "\n%s tier, host-synchronous, P/bw:C 1: none %.1f ms, strata %.1f ms a step; bound %.1f "
        "ms, strata / bound %.3f\n",
        nvme ? "NVMe" : "host", none * 1e3, strata * 1e3, bound * 1e3, strata / bound);
    const double r = none / strata;
    sync_ratio = sync_ratio == 0 ? r : std::min(sync_ratio, r);
    sync_bound = std::max(sync_bound, strata / bound);
  }
  std::printf("\nprefetch none / strata, host-synchronous: %.3f\n", sync_ratio);
  std::printf("prefetch strata / bound, host-synchronous: %.3f\n", sync_bound);
  std::printf("prefetch worst step / bound: %.3f\n", worst);
  return 0;
}
