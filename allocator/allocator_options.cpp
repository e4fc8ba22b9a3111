// STRATA_CONF: the options table of allocator_options (offload keys
// included) and its parser. docs/configuration.md's table is rendered from
// this table, and a test keeps the two equal.
#include "strata/allocator_options.hpp"

#include <array>
#include <cstdlib>

#include "strata/option_table.hpp"

namespace strata {

namespace {

using spec = option_spec<allocator_options>;
constexpr std::uint64_t no_max = std::numeric_limits<std::uint64_t>::max();

constexpr option_rule flag(std::string_view name, std::string_view doc) {
  return {.name = name, .kind = value_kind::flag, .doc = doc};
}

constexpr option_rule bytes(std::string_view name, std::uint64_t min, std::uint64_t max,
                            std::string_view doc) {
  return {.name = name, .kind = value_kind::bytes, .min = min, .max = max, .doc = doc};
}

// A byte size of at least `min`, or `none`, stored as `none_value` (0 or
// the largest value). Where `none` is stored as 0, 0 itself is not
// accepted (it would read as `none`): such a key's `min` is above 0.
constexpr option_rule bytes_or_none(std::string_view name, std::uint64_t min,
                                    std::uint64_t none_value, std::string_view doc) {
  return {.name = name,
          .kind = value_kind::bytes,
          .min = min,
          .none_word = "none",
          .none_value = none_value,
          .doc = doc};
}

const std::array<spec, 31> table{{
    {{.name = "device",
      .kind = value_kind::text,
      .unit = "a device spec (docs/device.md): `auto`, `cuda`, `cuda:N`, `sim[:key=value,...]`",
      .doc = "the GPU to allocate on; `auto` never falls back to `sim`"},
     [](allocator_options& o) -> option_field { return &o.device; }},
    {bytes_or_none("release_threshold", 0, no_max,
                   "idle pages (free memory the allocator keeps mapped or pooled) above this are "
                   "returned to the device after frees (`0`: all of them); `none` keeps "
                   "everything cached until `empty_cache`/`trim` or memory pressure"),
     [](allocator_options& o) -> option_field { return &o.release_threshold; }},
    {bytes("small_size", 512, 64ULL << 20,
           "requests up to this size (rounded down to a multiple of 512 bytes) are \"small\": "
           "counted in the `small_pool` stats; those up to min(small_size, 512 KiB) come from "
           "size-class slabs"),
     [](allocator_options& o) -> option_field { return &o.small_size; }},
    {{.name = "memory_fraction",
      .kind = value_kind::number,
      .high = 1.0,
      .low_open = true,
      .doc = "the share of the device's memory the allocator may hold; past it, requests fail "
             "with `out_of_memory` (also settable at run time with `set_memory_fraction`)"},
     [](allocator_options& o) -> option_field { return &o.memory_fraction; }},
    {{.name = "trace_buffer",
      .kind = value_kind::count,
      .max = max_trace_buffer,
      .unit = "a count of events",
      .doc = "the event trace's ring size (docs/allocator.md, \"Event trace\"); 0 turns the trace "
             "off. With the trace on, every allocate and free takes the locked path (no "
             "thread-cache fast path), so the trace is complete and in order; an event costs "
             "about 24 ns and 40 bytes"},
     [](allocator_options& o) -> option_field { return &o.trace_buffer; }},
    {{.name = "trace_frames",
      .kind = value_kind::count,
      .max = max_trace_frames,
      .unit = "a count of frames",
      .doc = "native stack frames captured with each trace event (`backtrace()`), symbolized "
             "when a snapshot pickle is written, so PyTorch's viewer shows where each block was "
             "allocated; 0: none. Costs one `backtrace()` per event (bench/RESULTS.md) and "
             "`trace_buffer` x `trace_frames` x 8 bytes, at most 1 GiB"},
     [](allocator_options& o) -> option_field { return &o.trace_frames; }},
    {flag("log_ooms",
          "print each out-of-memory report to stderr as `strata: ...` when a request fails "
          "after the whole OOM chain; the report is returned with the error and kept for "
          "`last_oom_report()` either way (`strata replay` turns it off: its report lists every "
          "OOM)"),
     [](allocator_options& o) -> option_field { return &o.log_ooms; }},
    {{.name = "report_on_exit",
      .kind = value_kind::text,
      .unit = "a file path (no commas)",
      .doc = "the preload shim and the LibTorch plugin write the stats, the memory summary and "
             "the last OOM report of every device's allocator there at process exit "
             "([integrations.md](integrations.md#the-exit-report)); the allocator itself "
             "ignores it"},
     [](allocator_options& o) -> option_field { return &o.report_on_exit; }},
    {flag("wait_before_grow",
          "when a request needs pages and freed memory is still waiting on events (frees "
          "pending on other streams, pages another stream's queued work holds), wait for it "
          "before creating new pages (`true`: least memory, a host wait of up to the GPU's lag), "
          "or create first and wait only when the device is full (`false`: no host wait where "
          "growing is possible)"),
     [](allocator_options& o) -> option_field { return &o.wait_before_grow; }},
    {bytes_or_none("host_capacity", 1ULL << 20, 0,
                   "offload tiers: the most pinned host memory the residency manager's host "
                   "pool holds, at least `host_chunk`; past it, spills go to NVMe "
                   "([tiers.md](tiers.md))"),
     [](allocator_options& o) -> option_field { return &o.offload.host_capacity; }},
    {bytes("host_chunk", 64ULL << 10, 1ULL << 30,
           "offload tiers: pinned memory the host pool's small-buffer runs take from the device "
           "at a time (buffers below `host_large`)"),
     [](allocator_options& o) -> option_field { return &o.offload.host_chunk; }},
    {bytes("host_large", 4096, 1ULL << 30,
           "offload tiers: host buffers of this size or more get one pinned allocation each"),
     [](allocator_options& o) -> option_field { return &o.offload.host_large; }},
    {{.name = "host_kept",
      .kind = value_kind::number,
      .high = 1.0,
      .doc = "offload tiers: freed large host buffers kept for reuse, as a fraction of the host "
             "bytes in use"},
     [](allocator_options& o) -> option_field { return &o.offload.host_kept; }},
    {{.name = "nvme_dir",
      .kind = value_kind::text,
      .unit = "a directory on a disk (no commas)",
      .doc = "offload tiers: where the NVMe tier's unnamed file lives; none: no NVMe tier"},
     [](allocator_options& o) -> option_field { return &o.offload.nvme_dir; }},
    {bytes("nvme_block_size", 4096, 1ULL << 30,
           "offload tiers: bytes per NVMe request; a multiple of the directory's direct-I/O "
           "block"),
     [](allocator_options& o) -> option_field { return &o.offload.nvme_block_size; }},
    {{.name = "nvme_queue_depth",
      .kind = value_kind::count,
      .min = 1,
      .max = 4096,
      .doc = "offload tiers: NVMe requests in flight"},
     [](allocator_options& o) -> option_field { return &o.offload.nvme_queue_depth; }},
    {bytes_or_none("nvme_capacity", 1ULL << 20, 0,
                   "offload tiers: the most bytes in the NVMe file; `none`: until the disk is "
                   "full"),
     [](allocator_options& o) -> option_field { return &o.offload.nvme_capacity; }},
    {flag("nvme_verify",
          "offload tiers: read every spill back from the disk and check it before its host "
          "copy is freed (one more read per spill)"),
     [](allocator_options& o) -> option_field { return &o.offload.nvme_verify; }},
    {flag("nvme_write_behind",
          "offload tiers: while the host tier could not make `host_lookahead` bytes of room "
          "without a write, write host buffers to NVMe in the background, so that pushing them "
          "off the host later writes nothing ([tiers.md](tiers.md))"),
     [](allocator_options& o) -> option_field { return &o.offload.nvme_write_behind; }},
    {flag("nvme_model",
          "offload tiers, on a timing-only device (`sim:...,data=none`, `strata plan`): model "
          "the NVMe tier instead of opening a file: extents are accounted, no byte is written, "
          "and each request takes its bytes at `nvme_model_gbps` on the calling thread's "
          "modeled clock, one request at a time ([tiers.md](tiers.md)); `nvme_dir` is not "
          "used, and `nvme_write_behind` must be off"),
     [](allocator_options& o) -> option_field { return &o.offload.nvme_model; }},
    {{.name = "nvme_model_gbps",
      .kind = value_kind::number,
      .high = 1e6,
      .doc = "offload tiers: the modeled NVMe tier's rate for reads and writes alike, GB/s "
             "(10^9 bytes a second); 0: instant"},
     [](allocator_options& o) -> option_field { return &o.offload.nvme_model_gbps; }},
    {bytes("prefetch_bytes", 0, no_max,
           "prefetcher: the most device bytes in prefetch fills in flight plus buffers "
           "prefetched and not yet acquired ([prefetch.md](prefetch.md)); `0` turns prefetch "
           "off"),
     [](allocator_options& o) -> option_field { return &o.offload.prefetch_bytes; }},
    {{.name = "prefetch_inflight",
      .kind = value_kind::count,
      .min = 1,
      .max = 1024,
      .doc = "prefetcher: prefetch fills outstanding at once (NVMe reads and host-to-device "
             "copies)"},
     [](allocator_options& o) -> option_field { return &o.offload.prefetch_inflight; }},
    {bytes("host_lookahead", 0, no_max,
           "prefetcher: how far ahead, in bytes of upcoming acquires, buffers on NVMe are read "
           "into pinned host memory; also the host room (at most `host_capacity`) the "
           "residency manager's write-behind keeps makeable without a write"),
     [](allocator_options& o) -> option_field { return &o.offload.host_lookahead; }},
    {bytes("device_lookahead", 0, no_max,
           "prefetcher: how far ahead, in bytes of upcoming acquires, buffers are copied to the "
           "device (within `prefetch_bytes`)"),
     [](allocator_options& o) -> option_field { return &o.offload.device_lookahead; }},
    {bytes("reuse_distance", 0, no_max,
           "prefetcher: a released buffer needed again within this many bytes of acquires "
           "stays on the device unless nothing else can be spilled"),
     [](allocator_options& o) -> option_field { return &o.offload.reuse_distance; }},
    {bytes("first_bucket_bytes", 0, no_max,
           "gradient buckets: the first bucket's limit ([gradients.md](gradients.md); DDP's "
           "`first_bucket_cap`); `0`: each gradient a bucket of its own"),
     [](allocator_options& o) -> option_field { return &o.gradients.first_bucket_bytes; }},
    {bytes("bucket_bytes", 0, no_max,
           "gradient buckets: later buckets' limit; a larger gradient is a bucket alone (DDP's "
           "`bucket_cap_mb`); `0`: each gradient a bucket of its own"),
     [](allocator_options& o) -> option_field { return &o.gradients.bucket_bytes; }},
    {{.name = "buckets_inflight",
      .kind = value_kind::count,
      .min = 1,
      .max = 64,
      .doc = "gradient buckets: staging buffers of copied or cast buckets (reductions queued "
             "with their own staging)"},
     [](allocator_options& o) -> option_field { return &o.gradients.buckets_inflight; }},
    {{.name = "bucket_reduce_dtype",
      .kind = value_kind::text,
      .unit = "`same`, `f32`, `bf16` or `f16`",
      .doc = "gradient buckets: the dtype buckets are all-reduced in; `same`: each bucket's "
             "own, others: cast there and back (`bf16` halves fp32 gradients' bytes on the "
             "wire)"},
     [](allocator_options& o) -> option_field { return &o.gradients.bucket_reduce_dtype; }},
    {flag("gradient_as_bucket_view",
          "gradient buckets: the buckets are slices of the gradient buffer, reduced in place "
          "(no copy); `false`: packed into staging buffers, as DDP does by default"),
     [](allocator_options& o) -> option_field { return &o.gradients.gradient_as_bucket_view; }},
}};

// The rules no row of the table can state: the frames' budget across two
// fields, and the words a text field takes.
status check_cross_field_rules(const allocator_options& o) {
  const std::string& t = o.gradients.bucket_reduce_dtype;
  if (t != "same" && t != "f32" && t != "bf16" && t != "f16") {
    return {errc::invalid_argument,
            "bucket_reduce_dtype: `" + t + "` is not one of `same`, `f32`, `bf16`, `f16`"};
  }
  if (o.offload.host_capacity != 0 && o.offload.host_capacity < o.offload.host_chunk) {
    return {errc::invalid_argument, "host_capacity " + format_byte_option(o.offload.host_capacity) +
                                        " is less than host_chunk " +
                                        format_byte_option(o.offload.host_chunk) +
                                        ": the host pool could not take one chunk"};
  }
  if (o.trace_buffer * o.trace_frames * sizeof(void*) > max_frame_bytes) {
    return {errc::invalid_argument, "trace_buffer " + std::to_string(o.trace_buffer) +
                                        " x trace_frames " + std::to_string(o.trace_frames) +
                                        " needs more than 1 GiB of frames: fewer events or frames"};
  }
  return {};
}

}  // namespace

std::span<const option_spec<allocator_options>> allocator_option_table() {
  return table;
}

status check_allocator_options(const allocator_options& options) {
  allocator_options copy = options;
  if (auto s = check_options(allocator_option_table(), copy); !s) return s;
  return check_cross_field_rules(options);
}

result<allocator_options> parse_allocator_conf(std::string_view text, allocator_options defaults) {
  auto items = parse_option_list(text, ':', "STRATA_CONF", "device");
  if (!items) return items.error();
  if (auto s = apply_options(allocator_option_table(), *items, defaults, "STRATA_CONF"); !s) {
    return s;
  }
  if (auto s = check_cross_field_rules(defaults); !s) return s;
  return defaults;
}

result<allocator_options> allocator_options_from_env() {
  const char* env = std::getenv("STRATA_CONF");  // NOLINT(concurrency-mt-unsafe): read-only
  return parse_allocator_conf(env != nullptr ? env : "");
}

}  // namespace strata
