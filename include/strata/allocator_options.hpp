// Options of the caching allocator and their text form, STRATA_CONF.
//
// STRATA_CONF is a comma-separated list of key:value pairs, like
// PYTORCH_CUDA_ALLOC_CONF, e.g.
//   STRATA_CONF="device:sim:capacity=16GiB,granularity=2MiB,memory_fraction:0.9"
// in the grammar of strata/option_table.hpp. The device spec may itself
// contain commas: an item of the form key=value (with '=' and no ':' before
// it) continues the `device` value before it. allocator_option_table() holds
// every key with its range and doc; docs/configuration.md's table is
// rendered from it.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

/// The offload tiers' settings (docs/tiers.md), read by the residency
/// manager (tiers/residency_manager.hpp); the allocator itself does not read
/// them. The tiers' option structs take their defaults from here.
struct offload_options {
  /// Most pinned host bytes; 0: no limit.
  std::uint64_t host_capacity = 0;
  /// Pinned memory the host pool's small-buffer runs take from the device at a time.
  std::uint64_t host_chunk = 2ULL << 20;
  /// Host buffers of this size or more get one pinned allocation each.
  std::uint64_t host_large = 256ULL << 10;
  /// Freed large host buffers kept for reuse, as a fraction of the bytes in use.
  double host_kept = 0.05;
  /// Directory of the NVMe tier's file; empty: no NVMe tier.
  std::string nvme_dir{};
  /// Bytes per NVMe request.
  std::uint64_t nvme_block_size = 1ULL << 20;
  /// NVMe requests in flight, 1 to 4096.
  std::uint64_t nvme_queue_depth = 32;
  /// Most bytes in the NVMe file; 0: until the disk is full.
  std::uint64_t nvme_capacity = 0;
  /// Read every spill back from the disk and check it before the host copy
  /// is freed (one more read of each spilled buffer).
  bool nvme_verify = true;
  /// Write host buffers to NVMe in the background while the host tier is
  /// short of room (the residency manager's write-behind, docs/tiers.md).
  bool nvme_write_behind = true;
  /// On a timing-only device: a modeled NVMe tier (no file, no byte
  /// written; each request takes its bytes at nvme_model_gbps on the
  /// calling thread's modeled clock) instead of one in nvme_dir.
  bool nvme_model = false;
  /// The modeled NVMe tier's rate, GB/s; 0: instant.
  double nvme_model_gbps = 3.0;
  /// Prefetcher (docs/prefetch.md): most device bytes in prefetch fills in
  /// flight plus prefetched buffers not yet acquired; 0 turns prefetch off.
  std::uint64_t prefetch_bytes = 512ULL << 20;
  /// Prefetch fills outstanding at once (NVMe reads and device copies), 1 to 1024.
  std::uint64_t prefetch_inflight = 16;
  /// Bytes of upcoming acquires whose buffers are read from NVMe to the host.
  std::uint64_t host_lookahead = 2ULL << 30;
  /// Bytes of upcoming acquires whose buffers are copied to the device.
  std::uint64_t device_lookahead = 512ULL << 20;
  /// A released buffer needed again within this many bytes of acquires is
  /// spilled only when nothing else can be.
  std::uint64_t reuse_distance = 0;
};

/// The gradient buckets' settings (docs/gradients.md), read by
/// strata::bucket_options_from (strata/gradient_buckets.hpp); the allocator
/// does not read them. Defaults are bucket_options' (DDP's).
struct gradient_options {
  /// The first bucket's limit, at least 1 byte.
  std::uint64_t first_bucket_bytes = 1ULL << 20;
  /// Later buckets' limit, at least 1 byte.
  std::uint64_t bucket_bytes = 25ULL << 20;
  /// Staging buffers of copied or cast buckets, 1 to 64.
  std::uint64_t buckets_inflight = 2;
  /// The dtype buckets are reduced in: "same" (each bucket's own), "f32",
  /// "bf16" or "f16".
  std::string bucket_reduce_dtype = "same";
  /// Buckets are slices of the gradient buffer (no copy).
  bool gradient_as_bucket_view = true;
};

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
  /// Where the integrations (the preload shim, the LibTorch plugin) write
  /// the stats, the memory summary and the last OOM report at process exit;
  /// empty: no report. The allocator itself does not read it.
  std::string report_on_exit{};
  /// The offload tiers' settings; the allocator itself does not read them.
  offload_options offload{};
  /// The gradient buckets' settings; the allocator itself does not read them.
  gradient_options gradients{};
};

/// Every STRATA_CONF key: kind, range, doc, field (strata/option_table.hpp).
STRATA_API std::span<const option_spec<allocator_options>> allocator_option_table();

/// Checks options a program filled in itself against the table's ranges
/// (parse_allocator_conf's results always pass). The allocator and the
/// residency manager call it when they are made; the parts they are built
/// from trust the values. Errors: invalid_argument naming the key.
STRATA_API status check_allocator_options(const allocator_options& options);

/// Parses STRATA_CONF text over `defaults`. Unknown keys and bad values are
/// invalid_argument errors naming the key and the accepted values.
STRATA_API result<allocator_options> parse_allocator_conf(std::string_view text,
                                                          allocator_options defaults = {});

/// Parses the STRATA_CONF environment variable (defaults if unset or empty).
STRATA_API result<allocator_options> allocator_options_from_env();

}  // namespace strata
