// The driver's virtual-memory calls by the size of the physical runs they
// work on (docs/device.md, "What driver calls cost").
//
// Why: Strata creates its physical memory one page (2 MiB) at a time and
// maps, opens and unmaps it page by page, and the calibration measured
// those calls only on 2 MiB runs (about 40 us to create, map and open a
// page on an H100, 70% of it cuMemSetAccess). cudaMalloc, which PyTorch's
// default allocator uses, took 0.24-0.32 ms for 64 MiB there: about 9 us
// a page. Whether the driver's per-page price falls when a run holds many
// pages (one cuMemCreate, one cuMemMap, one cuMemSetAccess for 64 MiB) is
// what decides if larger runs would cut a cold step's cost; this measures
// it. A run already mapped is mapped again at a second range, as
// stitching maps a page it already holds elsewhere: the driver maps a run
// only whole, from its start (an offset into a run is
// CUDA_ERROR_NOT_SUPPORTED, seen on an H200 with driver 580).
//
// For each run size, `--bytes` of memory as runs of that size:
//   create       create_pages(run), bytes / run times
//   map          each run mapped whole at consecutive addresses
//   set_access   one call over the whole range
//   map again    every run mapped again at a second range, one call a run
//   set_access again  one call over the second range
//   unmap again  the second range, one call a run
//   unmap        the first range, one call a run
//   release      every run
// each as microseconds per granularity page (device::call_totals: real
// time on a GPU, the charged price on the sim device, whose prices are per
// page whatever the run). Closing line, the first mapping of a page (create
// + map + set_access) with the largest runs over the smallest:
//   driver: first mapping per page, R-byte runs / G-byte runs: X
//
//   driver_bench [--device sim] [--bytes 256MiB] [--runs 2MiB,8MiB,32MiB,128MiB]
//                [--json OUT]
#include <array>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"
#include "exit_on_error.hpp"
#include "strata/device.hpp"
#include "strata/json_string.hpp"
#include "strata/option_table.hpp"

namespace {

using bench::check;
using bench::die;
using bench::option_pairs;
using bench::take;
using strata::driver_call;

struct settings {
  std::string device = "sim";
  std::size_t bytes = std::size_t{256} << 20;
  std::vector<std::size_t> runs{std::size_t{2} << 20, std::size_t{8} << 20, std::size_t{32} << 20,
                                std::size_t{128} << 20};
  std::string json;
  bool runs_given = false;  // else the default sizes that divide --bytes
};

constexpr const char* usage =
    "driver_bench [--device sim] [--bytes 256MiB] [--runs 2MiB,8MiB,32MiB,128MiB] [--json OUT]";

// The phases, in the order they run and print.
enum phase : std::size_t {
  create,
  map,
  set_access,
  map_again,
  set_access_again,
  unmap_again,
  unmap,
  release,
  phases
};
constexpr std::array<const char*, phases> phase_names{
    "create",           "map",         "set_access", "map_again",
    "set_access_again", "unmap_again", "unmap",      "release"};
constexpr std::array<driver_call, phases> phase_calls{
    driver_call::create_pages, driver_call::map,          driver_call::set_access,
    driver_call::map,          driver_call::set_access,   driver_call::unmap,
    driver_call::unmap,        driver_call::release_pages};

settings parse(int argc, char** argv) {
  settings st;
  for (const auto& [key, value] : option_pairs(argc, argv, usage)) {
    if (key == "--device") {
      st.device = value;
    } else if (key == "--bytes") {
      st.bytes = take(strata::parse_byte_size("--bytes", value), "--bytes");
      if (st.bytes < (std::size_t{1} << 20) || st.bytes > (std::size_t{64} << 30)) {
        die("--bytes must be 1MiB to 64GiB, not '" + value + "'");
      }
    } else if (key == "--runs") {
      st.runs_given = true;
      st.runs.clear();
      std::string_view rest = value;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string item(rest.substr(0, comma));
        st.runs.push_back(take(strata::parse_byte_size("--runs", item), "--runs"));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      if (st.runs.empty() || st.runs.size() > 16) die("--runs takes 1 to 16 sizes");
    } else if (key == "--json") {
      st.json = value;
    } else {
      bench::unknown_option(key, usage);
    }
  }
  return st;
}

// Microseconds per page of each phase for runs of `run` bytes.
std::array<double, phases> measure(strata::device& dev, std::size_t bytes, std::size_t run) {
  const std::size_t g = dev.granularity();
  const std::size_t n = bytes / run;
  const std::size_t pages = bytes / g;
  const std::uintptr_t first = take(dev.reserve(bytes), "reserve");
  const std::uintptr_t second = take(dev.reserve(bytes), "reserve");
  std::array<double, phases> us{};
  strata::driver_call_totals before = dev.call_totals();
  const auto done = [&](phase p) {
    const strata::driver_call_totals now = dev.call_totals();
    const auto k = static_cast<std::size_t>(phase_calls[p]);
    us[p] = static_cast<double>(now[k].ns - before[k].ns) / 1e3 / static_cast<double>(pages);
    before = now;
  };
  std::vector<strata::page_run> made;
  made.reserve(n);
  for (std::size_t i = 0; i < n; ++i) made.push_back(take(dev.create_pages(run), "create_pages"));
  done(create);
  for (std::size_t i = 0; i < n; ++i) check(dev.map(first + i * run, run, made[i]), "map");
  done(map);
  check(dev.set_access(first, bytes), "set_access");
  done(set_access);
  for (std::size_t i = 0; i < n; ++i) {
    check(dev.map(second + i * run, run, made[i]), "map again");
  }
  done(map_again);
  check(dev.set_access(second, bytes), "set_access again");
  done(set_access_again);
  for (std::size_t i = 0; i < n; ++i) check(dev.unmap(second + i * run, run), "unmap again");
  done(unmap_again);
  for (std::size_t i = 0; i < n; ++i) check(dev.unmap(first + i * run, run), "unmap");
  done(unmap);
  for (const strata::page_run& r : made) check(dev.release_pages(r), "release_pages");
  done(release);
  check(dev.free_reservation(second, bytes), "free_reservation");
  check(dev.free_reservation(first, bytes), "free_reservation");
  return us;
}

double first_mapping(const std::array<double, phases>& us) {
  return us[create] + us[map] + us[set_access];
}

}  // namespace

int main(int argc, char** argv) {
  const settings st = parse(argc, argv);
  auto dev = take(strata::open_device(st.device), "--device");
  const std::size_t g = dev->granularity();
  if (st.bytes % g != 0) die("--bytes must be a multiple of the granularity");
  std::vector<std::size_t> runs;
  for (const std::size_t run : st.runs) {
    if (!st.runs_given && (run % g != 0 || st.bytes % run != 0)) continue;
    if (run == 0 || run % g != 0 || st.bytes % run != 0) {
      die("--runs: each size must be a multiple of the granularity (" + std::to_string(g) +
          " bytes) that divides --bytes (" + std::to_string(st.bytes) + "), not " +
          std::to_string(run));
    }
    runs.push_back(run);
  }
  if (runs.empty()) die("--bytes: no default run size divides it: give --runs");
  std::printf("driver: %s, %zu MiB as runs of each size; us per %zu KiB page\n",
              dev->name().c_str(), st.bytes >> 20, g >> 10);
  std::printf("%10s", "run");
  for (const char* name : phase_names) std::printf(" %17s", name);
  std::printf("\n");
  std::vector<std::array<double, phases>> rows;
  for (const std::size_t run : runs) {
    rows.push_back(measure(*dev, st.bytes, run));
    std::printf("%6zu MiB", run >> 20);
    for (const double us : rows.back()) std::printf(" %17.2f", us);
    std::printf("\n");
  }
  std::size_t lo = 0;
  std::size_t hi = 0;
  for (std::size_t i = 1; i < runs.size(); ++i) {
    if (runs[i] < runs[lo]) lo = i;
    if (runs[i] > runs[hi]) hi = i;
  }
  const double ratio =
      first_mapping(rows[lo]) > 0 ? first_mapping(rows[hi]) / first_mapping(rows[lo]) : 1.0;
  std::printf("\ndriver: first mapping per page, %zu MiB runs / %zu MiB runs: %.3f\n",
              runs[hi] >> 20, runs[lo] >> 20, ratio);
  if (!st.json.empty()) {
    std::string j = "{\"device\":" + strata::json_string(dev->name()) +
                    ",\"granularity\":" + std::to_string(g) +
                    ",\"bytes\":" + std::to_string(st.bytes) + ",\"runs\":[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      j += (i ? "," : "") + std::string("{\"run_bytes\":") + std::to_string(runs[i]) +
           ",\"us_per_page\":{";
      for (std::size_t p = 0; p < phases; ++p) {
        char v[48];
        std::snprintf(v, sizeof v, "%.4f", rows[i][p]);
        j += (p ? ",\"" : "\"") + std::string(phase_names[p]) + "\":" + v;
      }
      j += "}}";
    }
    char r[48];
    std::snprintf(r, sizeof r, "%.4f", ratio);
    j += std::string("],\"first_mapping_ratio\":") + r + "}\n";
    FILE* f = std::fopen(st.json.c_str(), "w");
    if (f == nullptr || std::fputs(j.c_str(), f) < 0 || std::fclose(f) != 0) {
      die("--json: cannot write " + st.json);
    }
  }
  return 0;
}
