// The NVMe store against fio: writes and reads N bytes (default 4 GiB)
// through the store, and the same through fio with the same block size,
// queue depth, io_uring and O_DIRECT on the same directory. A virtual disk
// runs whichever comes second faster or slower, so the two alternate order
// over R repetitions (default 3) and the medians are compared. The store's
// rows also give the host CPU time it spent per GiB (all its threads:
// submitting, reaping, bounce-buffer copies, checksums), which the disk's
// noise does not move. The last line is `nvme vs fio: read R, write W`
// (store / fio, medians).
//
//   nvme_bench [--dir D] [--bytes 4GiB] [--block-size 1MiB] [--queue-depth 32]
//              [--repetitions 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "exit_on_error.hpp"
#include "strata/nvme_store.hpp"
#include "strata/option_table.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The process's CPU time so far (every thread), in seconds.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// fio's bandwidth (bytes/s) for `rw` ("read" or "write"), from its JSON.
double fio_bandwidth(const std::string& fio_args, const char* rw) {
  const std::string cmd = "fio " + fio_args + " --rw=" + rw + " --output-format=json 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) {
    std::fprintf(stderr, "nvme_bench: %s failed:\n%s\n", cmd.c_str(), out.c_str());
    return -1;
  }
  const std::size_t section = out.find(std::string("\"") + rw + "\" : {");
  const std::size_t key = out.find("\"bw_bytes\"", section);
  if (section == std::string::npos || key == std::string::npos) return -1;
  return std::strtod(out.c_str() + out.find(':', key) + 1, nullptr);
}

struct run {
  double write = 0;  // bytes/s
  double verify = 0;
  double read = 0;
  double write_cpu = 0;  // CPU seconds per byte
  double verify_cpu = 0;
  double read_cpu = 0;
};

// Writes `count` extents of `extent` bytes through a fresh store, verifies
// them (the residency manager's read-back of a spill), reads them back,
// checks the bytes; the store's file goes away at the end.
bool store_run(const strata::tier_options& o, const unsigned char* src, unsigned char* dst,
               std::size_t extent, std::size_t count, run& r) {
  auto store = strata::nvme_store::open(o);
  if (!store) {
    std::fprintf(stderr, "nvme_bench: %s\n", store.error().to_string().c_str());
    return false;
  }
  std::vector<std::uint64_t> ids;
  const auto bytes = static_cast<double>(count * extent);
  auto t0 = clock_type::now();
  double c0 = cpu_seconds();
  for (std::size_t i = 0; i < count; ++i) {
    auto id = (*store)->write(src, extent);
    if (!id) {
      std::fprintf(stderr, "nvme_bench: write: %s\n", id.error().to_string().c_str());
      return false;
    }
    ids.push_back(*id);
  }
  r.write = bytes / seconds_since(t0);
  r.write_cpu = (cpu_seconds() - c0) / bytes;
  t0 = clock_type::now();
  c0 = cpu_seconds();
  for (const std::uint64_t id : ids) {
    if (auto s = (*store)->verify(id); !s) {
      std::fprintf(stderr, "nvme_bench: verify: %s\n", s.to_string().c_str());
      return false;
    }
  }
  r.verify = bytes / seconds_since(t0);
  r.verify_cpu = (cpu_seconds() - c0) / bytes;
  t0 = clock_type::now();
  c0 = cpu_seconds();
  for (const std::uint64_t id : ids) {
    if (auto s = (*store)->read(id, dst, extent); !s) {
      std::fprintf(stderr, "nvme_bench: read: %s\n", s.to_string().c_str());
      return false;
    }
  }
  r.read = bytes / seconds_since(t0);
  r.read_cpu = (cpu_seconds() - c0) / bytes;
  if (std::memcmp(src, dst, extent) != 0) {
    std::fprintf(stderr, "nvme_bench: the bytes read back differ\n");
    return false;
  }
  return true;
}

constexpr const char* usage =
    "nvme_bench [--dir D] [--bytes 4GiB] [--block-size 1MiB] [--queue-depth 32] "
    "[--repetitions 3]";

// A byte size in [lo, hi] (`range` says it in words) and a multiple of
// 4 KiB (O_DIRECT), or the program ends naming `key`.
std::uint64_t byte_size(const std::string& key, const std::string& value, std::uint64_t lo,
                        std::uint64_t hi, const char* range) {
  const std::uint64_t n = bench::take(strata::parse_byte_size(key, value), key.c_str());
  if (n < lo || n > hi || n % 4096 != 0) {
    bench::die(key + " must be a multiple of 4KiB, " + range + ", not " + value);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  strata::tier_options o;
  o.nvme_dir = ".";
  std::uint64_t total = 4ULL << 30;
  int repetitions = 3;
  for (const auto& [key, value] : bench::option_pairs(argc, argv, usage)) {
    if (key == "--dir") {
      o.nvme_dir = value;
    } else if (key == "--bytes") {
      total = byte_size(key, value, 1ULL << 20, 1ULL << 40, "1MiB to 1TiB");
    } else if (key == "--block-size") {
      o.nvme_block_size = byte_size(key, value, 4096, 1ULL << 30, "4KiB to 1GiB");
    } else if (key == "--queue-depth") {
      o.nvme_queue_depth = bench::whole_number(key, value, 1, 4096);
    } else if (key == "--repetitions") {
      repetitions = static_cast<int>(bench::whole_number(key, value, 1, 100));
    } else {
      bench::unknown_option(key, usage);
    }
  }
  // Large extents: each write() and read() drains its pipeline at the end.
  const std::size_t extent = std::min<std::uint64_t>(total, 1ULL << 30);
  const std::size_t count = total / extent;
  auto* src = static_cast<unsigned char*>(std::aligned_alloc(4096, extent));
  auto* dst = static_cast<unsigned char*>(std::aligned_alloc(4096, extent));
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < extent; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(src + i, &v, 8);
  }
  const std::string fio_args = "--name=strata-nvme-bench --directory=" + o.nvme_dir +
                               " --size=" + std::to_string(count * extent) +
                               " --bs=" + std::to_string(o.nvme_block_size) +
                               " --iodepth=" + std::to_string(o.nvme_queue_depth) +
                               " --ioengine=io_uring --direct=1 --numjobs=1";
  std::vector<double> sw;  // store write, verify, read; fio write, read
  std::vector<double> sv;
  std::vector<double> sr;
  std::vector<double> fw;
  std::vector<double> fr;
  std::vector<double> cw;  // the store's CPU seconds per byte: write, verify, read
  std::vector<double> cv;
  std::vector<double> cr;
  for (int rep = 0; rep < repetitions; ++rep) {
    run store{};
    run fio{};
    for (int turn = 0; turn < 2; ++turn) {
      if ((turn == 0) == (rep % 2 == 0)) {
        if (!store_run(o, src, dst, extent, count, store)) return 1;
      } else {
        fio.write = fio_bandwidth(fio_args, "write");
        fio.read = fio_bandwidth(fio_args + " --unlink=1", "read");
        if (fio.write <= 0 || fio.read <= 0) {
          std::fprintf(stderr, "nvme_bench: fio did not run (is it installed?)\n");
          return 1;
        }
      }
    }
    sw.push_back(store.write);
    sv.push_back(store.verify);
    sr.push_back(store.read);
    fw.push_back(fio.write);
    fr.push_back(fio.read);
    cw.push_back(store.write_cpu);
    cv.push_back(store.verify_cpu);
    cr.push_back(store.read_cpu);
  }
  std::free(src);
  std::free(dst);
  const double gib = 1024.0 * 1024 * 1024;
  std::printf(
      "%s, %.2f GiB each way, block %llu, queue depth %llu, O_DIRECT, io_uring, "
      "median of %d\n",
      o.nvme_dir.c_str(), static_cast<double>(count * extent) / gib,
      static_cast<unsigned long long>(o.nvme_block_size),
      static_cast<unsigned long long>(o.nvme_queue_depth), repetitions);
  const double ms_per_gib = gib * 1e3;
  std::printf("%-8s %12s %12s %8s %16s\n", "", "store GiB/s", "fio GiB/s", "ratio",
              "store CPU ms/GiB");
  std::printf("%-8s %12.2f %12.2f %8.2f %16.0f\n", "write", median(sw) / gib, median(fw) / gib,
              median(sw) / median(fw), median(cw) * ms_per_gib);
  std::printf("%-8s %12.2f %12.2f %8.2f %16.0f\n", "read", median(sr) / gib, median(fr) / gib,
              median(sr) / median(fr), median(cr) * ms_per_gib);
  std::printf("%-8s %12.2f %12s %8s %16.0f  (read back and checked, no fio counterpart)\n",
              "verify", median(sv) / gib, "-", "-", median(cv) * ms_per_gib);
  std::printf("nvme vs fio: read %.2f, write %.2f\n", median(sr) / median(fr),
              median(sw) / median(fw));
  return 0;
}
