// Options of the caching allocator: the allocator's section of STRATA_CONF
// (strata/conf_text.hpp), e.g.
//   STRATA_CONF="device:sim:capacity=16GiB,granularity=2MiB,memory_fraction:0.9"
// in the grammar of strata/option_table.hpp. The device spec may itself
// contain commas: an item of the form key=value (with '=' and no ':' before
// it) continues the `device` value before it. allocator_option_table() holds
// the section's keys with their ranges and docs; docs/configuration.md's
// "allocator" table is rendered from it. The other layers' keys are theirs
// (tier_options, prefetch_options, bucket_options, the integrations').
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "strata/conf_text.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

/// Limits of the event trace's options: events in the ring, frames per
/// event, and bytes of frames in all (trace_buffer x trace_frames x 8).
inline constexpr std::uint64_t max_trace_buffer = std::uint64_t{1} << 26;
inline constexpr std::uint64_t max_trace_frames = 32;
inline constexpr std::uint64_t max_frame_bytes = std::uint64_t{1} << 30;

struct allocator_options {
  /// Device spec (see docs/device.md): "auto", "cuda:N" or "sim:...".
  std::string device = "auto";
  /// Idle cached bytes (free pages the allocator keeps) above which pages
  /// are returned to the device. Default: keep everything.
  std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();
  /// Requests up to this many bytes are "small": served from size-class
  /// slabs (up to 512 KiB) and counted in the small_pool stats.
  std::uint64_t small_size = 1ULL << 20;
  /// Fraction of the device's memory the allocator may hold, (0, 1].
  double memory_fraction = 1.0;
  /// When a request needs pages and freed memory is still waiting on events
  /// (pending frees, pages another stream's queued work holds), wait for it
  /// before creating new pages (true: least memory, a host wait of up to
  /// the GPU's lag), or create first and wait only when the device is full
  /// (false, the default: no host wait inside an allocation where growing
  /// is possible).
  bool wait_before_grow = false;
  /// New pages are created in physical runs of up to this many bytes
  /// (rounded down to the granularity; 0 or less than a page: one page a
  /// run). A driver call costs about the same whatever the run's size, so
  /// larger runs cost fewer calls when memory grows; but a run maps, moves
  /// and goes back only whole, so its idle pages serve no other request
  /// while any of its pages holds live bytes (docs/allocator.md, "Page
  /// runs").
  std::uint64_t page_run_size = 0;
  /// Events the event trace keeps (a ring: the newest win); 0 turns the
  /// trace off. While it is on, every call takes the locked path so that
  /// the trace is complete and in order. At most 2^26.
  std::uint64_t trace_buffer = 0;
  /// Native stack frames captured with each trace event (0 to 32; 0: none),
  /// symbolized in snapshot_pickle(). Costs a backtrace() per event and
  /// trace_buffer x trace_frames x 8 bytes, at most 1 GiB in all.
  std::uint64_t trace_frames = 0;
  /// Print each out-of-memory report to stderr (one line per failed
  /// request, after the whole OOM chain). The report is returned with the
  /// error and kept for last_oom_report() either way.
  bool log_ooms = true;
};

/// The allocator's STRATA_CONF keys: kind, range, doc, field
/// (strata/option_table.hpp).
STRATA_API std::span<const option_spec<allocator_options>> allocator_option_table();

/// This section of STRATA_CONF (strata/conf_text.hpp).
STRATA_API const conf_section& allocator_conf_section();

/// Checks options a program filled in itself against the table's ranges
/// and the frames' budget (trace_buffer x trace_frames); parsed options
/// always pass. The allocator calls it when it is made; the parts it is
/// built from trust the values. Errors: invalid_argument naming the key.
STRATA_API status check_allocator_options(const allocator_options& options);

/// The allocator's section of `conf` over `defaults`. Errors:
/// invalid_argument naming the key (check_allocator_options).
STRATA_API result<allocator_options> allocator_options_from(const conf_text& conf,
                                                            allocator_options defaults = {});

/// Parses STRATA_CONF text (conf_text::parse: every layer's keys are
/// accepted and checked) and returns the allocator's section over
/// `defaults`. Errors: invalid_argument naming the key and the accepted
/// values, or listing the keys for an unknown one.
STRATA_API result<allocator_options> parse_allocator_conf(std::string_view text,
                                                          allocator_options defaults = {});

/// parse_allocator_conf() of the STRATA_CONF environment variable
/// (defaults if unset or empty).
STRATA_API result<allocator_options> allocator_options_from_env();

}  // namespace strata
