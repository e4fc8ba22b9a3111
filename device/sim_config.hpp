// Configuration of the simulated GPU, parsed from the key=value part of a
// "sim:..." device spec. Every key is documented in docs/device.md.
//
// Thread safety: a plain value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "strata/error.hpp"
#include "strata/option_table.hpp"

namespace strata {

/// Calls of the sim device that can be made to fail on purpose.
enum class sim_fault : std::uint8_t { create_pages, map, copy, host_alloc };
inline constexpr std::size_t sim_fault_count = 4;

/// "Never fail".
inline constexpr std::uint64_t sim_fault_never = std::numeric_limits<std::uint64_t>::max();

/// Limits of the sim device's keys, each refused beyond with a message: the
/// capacity (16 TiB: twice it must fit in the address space), the page
/// granularity (1 GiB) and the copy latency and operation delay (10 s).
inline constexpr std::uint64_t max_sim_capacity = std::uint64_t{1} << 44;
inline constexpr std::uint64_t max_sim_granularity = std::uint64_t{1} << 30;
inline constexpr std::uint64_t max_sim_delay_us = 10'000'000;
/// The fastest copy rate a sim device models, GB/s (more is a typo).
inline constexpr double max_sim_gbps = 1e6;
/// The fastest compute rate a sim device models, 10^12 FLOP/s.
inline constexpr double max_sim_tflops = 1e6;
/// The most a driver call's modeled cost may be, microseconds per unit.
inline constexpr double max_sim_call_us = 1e6;
/// The unit of the driver's per-page costs: the page size they were
/// measured with.
inline constexpr std::size_t sim_cost_unit = std::size_t{2} << 20;

struct sim_config {
  std::uint64_t capacity = 80ULL << 30;    ///< Physical bytes, a granularity multiple.
  std::uint64_t granularity = 2ULL << 20;  ///< Page size, a power of two >= 4 KiB.
  double h2d_gbps = 0;  ///< Host-to-device copy rate in GB/s (1e9 B/s); 0 = instant.
  double d2h_gbps = 0;  ///< Device-to-host copy rate; 0 = instant.
  double d2d_gbps = 0;  ///< Device-to-device copy rate; 0 = instant.
  double tflops = 0;    ///< Timing only: modeled kernels' rate, 10^12 FLOP/s; 0 = instant.
  std::uint64_t copy_latency_us = 0;  ///< Fixed cost added to every copy.
  std::uint64_t op_delay_us = 0;      ///< Delay before every stream operation (a slow stream).
  /// How far the GPU runs behind the host: work queued at host time t
  /// starts no earlier than t + gpu_lag_us.
  std::uint64_t gpu_lag_us = 0;
  /// "h100": the driver costs below default to what an H100 measured;
  /// "none": every cost not given by its own key is 0 (for tests of
  /// other modeled times).
  std::string driver_costs = "h100";
  /// What driver calls cost the calling thread, in microseconds a call
  /// (`set_access` and `unmap`: a mapping the range covers): what Strata's
  /// counters measured on an H100 inside PyTorch training steps, where the
  /// GPU is busy, on 2 MiB runs (bench/RESULTS.md, "On an H100";
  /// `release_pages`, never called there, from
  /// shared/calibration/README.md's busy-GPU figure). An idle driver is
  /// cheaper: 9.9, 1.7, 28.8, 18.0 and 10.3. The driver prices a call,
  /// not its bytes: on an H200 a 1 GiB run cost about what a 2 MiB one
  /// did to create, map, open and unmap (bench/RESULTS.md, "the price is
  /// per call"). Charged on the modeled clock of a timing-only device,
  /// slept on a device with data.
  double create_us = 14.0;
  double map_us = 2.2;
  double set_access_us = 30.0;
  double unmap_us = 30.0;
  double release_us = 17.0;
  /// What each 2 MiB of a run beyond its first adds to `create_pages`,
  /// `set_access` (of a mapping) and `release_pages`: the H200's fit over
  /// runs of 2 MiB to 1 GiB (0.13, 0.15 and 1.2 us; map and unmap add
  /// under 0.04 us, not charged).
  double create_page_us = 0.13;
  double set_access_page_us = 0.15;
  double release_page_us = 1.2;
  /// Microseconds per event call, as Strata's counters measured them on an
  /// H100 inside PyTorch training steps (bench/RESULTS.md, "On an H100"):
  /// the driver is busy launching the step's kernels, and a call there
  /// costs 10-15x what it costs on an idle driver (0.15 / 0.13 us).
  double record_event_us = 1.7;
  double query_event_us = 1.9;
  /// A stream handle the device did not create becomes a new stream of its
  /// own on first use (as handles from a CUDA runtime would), instead of an
  /// "unknown stream" error.
  bool adopt_streams = false;
  /// "host": memory holds bytes and copies move them. "none" (timing only,
  /// for plans): pages, mappings and capacity are accounted exactly as
  /// with "host", but copies and memsets take their modeled time and move
  /// nothing, so untouched device memory costs the host nothing; the host
  /// cannot use the memory (memory_is_host() is false).
  std::string data = "host";
  /// For each sim_fault: the number of calls that succeed before one fails
  /// (once); sim_fault_never disables it.
  std::array<std::uint64_t, sim_fault_count> fail_after{sim_fault_never, sim_fault_never,
                                                        sim_fault_never, sim_fault_never};
};

/// Parses "key=value,..." (the text after "sim:") by sim_config_table().
/// Unknown keys and bad values are invalid_argument errors naming the key
/// and the accepted values; so is a capacity that is not a multiple of the
/// granularity.
result<sim_config> parse_sim_config(std::string_view text);

/// The sim device's keys (docs/device.md's table is rendered from it).
std::span<const option_spec<sim_config>> sim_config_table();

}  // namespace strata
