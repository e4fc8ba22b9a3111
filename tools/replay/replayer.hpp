// Replays an allocation trace on Strata's allocator and measures it.
//
// Seeds are allocated first; then each op in order: allocations with
// malloc_async on the recorded stream, frees with free_async on that
// stream (stream-ordered). Recorded streams map to streams created on the
// device (0 is the default stream), at most max_replay_streams of them. A
// failed allocation is an OOM: recorded with its report, and its later free
// skipped. Where the recording allocator failed (trace.failures), the replay
// asks whether Strata had the memory at that point: its available memory
// (device free plus cached bytes) against the request; nothing is allocated.
//
// Two passes: the first measures everything and finds the op at which
// Strata's reserved bytes peak; the second replays up to that op on a fresh
// allocator and captures the page map and the largest live blocks there.
//
// Thread safety: replay() is reentrant; it creates its own allocators.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "alloc_trace.hpp"
#include "pytorch_model/pytorch_allocator.hpp"
#include "strata/strata.hpp"
#include "timeline.hpp"

namespace strata::replay {

/// The most distinct streams a trace may use: each is a device stream (a
/// thread on the sim device); real traces use a handful.
inline constexpr std::size_t max_replay_streams = 256;
/// The most warm-up passes a replay makes.
inline constexpr std::size_t max_warmup = 16;
/// The most repeats of the trace's last step a timeline replay adds.
inline constexpr std::size_t max_steady_repeats = 64;

struct replay_options {
  std::string device = "sim:capacity=80GiB";
  std::string conf;       // STRATA_CONF text applied over the defaults
  bool progress = false;  // a progress bar on stderr
  /// Keep the allocator's event trace over the whole replay and return its
  /// snapshot pickle (replay_result::snapshot_pickle). Every call then takes
  /// the allocator's locked path, so time per call is not comparable.
  bool snapshot = false;
  /// Pace the replay by the trace's recorded times on a timing-only sim
  /// device with the GPU behind (timeline.hpp), and say what the
  /// allocator added (replay_result::timeline). Needs a timed trace.
  bool timeline = false;
  /// How far the GPU runs behind the host when the trace has no kernels.
  double gpu_lag_ms = 12;
  /// Passes over the trace's ops before the measured one (a trace recorded
  /// in a warm process, like a profiler trace of steps after the first,
  /// replays warm that way). At most max_warmup. Unset: 0, but 1 with
  /// `timeline` for a trace that starts warm (alloc_trace.hpp,
  /// starts_warm): its recorded job had mapped its memory before the
  /// trace began, so a cold replay would charge the timeline for mappings
  /// the job never made in it.
  std::optional<std::size_t> warmup;
  /// With `timeline`: replay the trace once more followed by this many
  /// repeats of its last step (step_cycle.hpp), and measure the last half
  /// of them (timeline_result::steady): the steady state a job's later
  /// steps reach. 0: off. At most max_steady_repeats.
  std::size_t steady_repeats = 8;
  /// Issue the calls a trace that records frames has without them (a
  /// PyTorch snapshot's autograd-thread calls: the backward pass) from a
  /// second thread, as a training step does; each thread then has its own
  /// thread cache in Strata. Off: every call from one thread. On by
  /// default: one thread hid a transient an H200 run showed (a 10 GiB
  /// remap in its sixth step) that two threads replay.
  bool autograd_thread = true;
};

struct replay_sample {
  std::size_t op = 0;  // ops replayed so far
  std::uint64_t live = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t baseline = 0;  // 0 when unknown
};

struct replay_oom {
  std::size_t op = 0;  // index into the trace's ops; seeds count as op 0
  std::uint64_t size = 0;
  std::string report_json;
  std::string message;
};

/// Where the recording allocator failed: did Strata have the memory then?
struct replay_failure {
  recorded_failure recorded;
  std::uint64_t strata_available = 0;  // device free + Strata's cached bytes then
  bool fits = false;                   // strata_available >= the request
};

struct live_block {
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::size_t op = 0;  // the op that allocated it (0 for a seed)
  std::uint32_t frames = trace_op::no_frames;
};

/// An allocator call of the measured pass that called the driver: which
/// op of the trace (its kind, size, stream and stack are the op's), and
/// the driver calls it made with their time (the device's counters just
/// before and after it: every kind, the memory calls, the event calls and
/// the waits for queued work). On a timing-only sim device the time is the
/// modeled one, what the calls cost on the GPU the device models.
struct costly_call {
  std::size_t op = 0;        // index into the trace's ops
  bool second_half = false;  // with replay_options::timeline: in the second half
  std::uint64_t driver_calls = 0;
  std::uint64_t driver_ns = 0;
};
/// How many calls replay_result::costliest and costliest_second_half keep.
inline constexpr std::size_t costliest_kept = 10;

struct replay_result {
  std::string device;
  std::uint64_t granularity = 0;
  std::size_t events = 0;  // seeds + ops replayed
  std::uint64_t peak_live = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::size_t peak_op = 0;   // ops replayed when reserved first hit its peak
  double fragmentation = 0;  // 1 - peak allocated / peak reserved
  std::int64_t stitches = 0;
  std::int64_t stitched_bytes = 0;
  std::size_t threads = 1;        // 2: calls without frames came from a second thread
  std::size_t warmup = 0;         // warm-up passes made (replay_options::warmup)
  bool warmup_automatic = false;  // made because the trace starts warm, unasked
  std::vector<replay_oom> ooms;
  std::vector<replay_failure> failures;  // one per trace.failures entry
  std::size_t calls = 0;
  double cpu_ns_median = 0;  // wall time per malloc_async/free_async call
  double cpu_ns_p99 = 0;
  double cpu_ns_mean = 0;  // the tail included: what a step's host pays per call
  bool has_baseline = false;
  std::uint64_t baseline_peak_reserved = 0;
  /// What PyTorch's caching allocator would reserve for the trace's
  /// requests at their peak, by default and with expandable segments
  /// (pytorch_model/pytorch_allocator.hpp: exact on the H100 snapshots;
  /// it keeps one pool for all streams, where PyTorch keeps one a stream).
  std::uint64_t modeled_native_peak = 0;
  std::uint64_t modeled_expandable_peak = 0;
  std::vector<replay_sample> samples;  // at most ~2000, evenly spread
  std::vector<arena_pages> page_map_at_peak;
  std::vector<live_block> largest_at_peak;  // up to ten
  std::string snapshot_pickle;              // with replay_options::snapshot
  timeline_result timeline;                 // with replay_options::timeline
  std::int64_t device_waits = 0;            // the allocator's waits for device work
  double device_wait_ms = 0;                // and their time
  driver_call_totals driver{};              // the device's driver calls
  /// The measured pass's calls with the most driver time, costliest first
  /// (an earlier op first among equals), at most costliest_kept.
  std::vector<costly_call> costliest;
  /// With replay_options::timeline: the same of the second half's calls,
  /// what a step settled or not still costs.
  std::vector<costly_call> costliest_second_half;
};

/// PyTorch's caching allocator, modeled (pytorch_model/pytorch_allocator.hpp),
/// given `trace`'s requests as the replay makes them: the seeds first, then
/// the ops, `passes` times (at least once; a free of an address not live is
/// skipped, and an allocation at a live address frees the block there
/// first). The model's growths are those of the last pass, the one a
/// replay with `passes - 1` warm-up passes measures. Thread safety: a pure
/// function.
[[nodiscard]] pytorch_allocator_model run_pytorch_model(const alloc_trace& trace,
                                                        pytorch_allocator_model::mode m,
                                                        std::size_t passes = 1);

/// run_pytorch_model(trace, m).peak_reserved(): what PyTorch's caching
/// allocator would reserve at its peak for `trace`'s requests. Bytes.
[[nodiscard]] std::uint64_t modeled_peak_reserved(const alloc_trace& trace,
                                                  pytorch_allocator_model::mode m);

/// Replays `trace`. Errors, each naming its cause: "--device: ..." or
/// "--conf: ..." for the options, "FILE: event N: ..." for a device failure
/// during the replay or a trace with more than max_replay_streams streams.
result<replay_result> replay(const alloc_trace& trace, const replay_options& options_in);

}  // namespace strata::replay
