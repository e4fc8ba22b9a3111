// An allocation trace, whatever file it came from: blocks live before the
// trace starts (seeds), then allocations and frees in order, and, where the
// recording allocator's segment events were in the file, its reserved bytes
// over time (the baseline Strata is compared with).
//
// read_trace() reads, directly and without a conversion step:
//   - PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles,
//     PyTorch 2.0 and later), and Strata's own snapshot_pickle() exports;
//   - Strata's event trace JSON (trace_json());
//   - RMM logging CSV (Thread,Time,Action,Pointer,Size,Stream), the format
//     of RMM's fmt-era releases (to 24.10) and of current ones;
//   - buffer-lifetime CSV (id,lower,upper,size);
//   - torch.profiler Chrome traces with memory events (profile_memory),
//     with their kernels and host waits (profiler_trace.cpp);
// any of them compressed with xz.
// Errors name the file and the line, byte offset or event index. Every
// number is checked: sizes are integers from 0 to max_trace_bytes,
// addresses non-negative, a free of a block the trace already freed is an
// error, and so is a value of the wrong type. Nothing is skipped silently:
// actions a reader does not replay are counted in `unknown_actions`.
//
// Thread safety: plain values; read_trace is reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/error.hpp"

namespace strata::replay {

/// The largest size a trace may name (1 PiB): larger is an error, not a
/// request, so no sum of sizes can overflow.
inline constexpr std::uint64_t max_trace_bytes = std::uint64_t{1} << 50;
/// The largest file read_trace() reads (1 GiB; also once decompressed).
inline constexpr std::uint64_t max_trace_file_bytes = std::uint64_t{1} << 30;
/// The largest profiler trace JSON read (128 MiB: it is parsed whole).
inline constexpr std::uint64_t max_profiler_trace_bytes = std::uint64_t{128} << 20;

enum class op_kind : std::uint8_t { alloc, free };

struct trace_op {
  static constexpr std::uint32_t no_frames = 0xffffffff;
  op_kind kind = op_kind::alloc;
  std::uint64_t addr = 0;            // the recording's address: a key, never dereferenced
  std::uint64_t size = 0;            // bytes requested (alloc); the block's size (free)
  std::uint64_t stream = 0;          // the recording's stream handle, 0 = default stream
  std::uint32_t frames = no_frames;  // index into alloc_trace::frames
  std::int64_t time_ns = 0;          // when the recording made the call (alloc_trace::timed)
};

/// An allocation the recording allocator could not serve: PyTorch's `oom`
/// trace entry or RMM's `allocate failure` row. It happened just before
/// ops[before_op] (ops.size(): after the last op).
struct recorded_failure {
  std::size_t before_op = 0;
  std::uint64_t size = 0;         // bytes requested
  std::uint64_t device_free = 0;  // the device's free bytes then (PyTorch only)
  bool device_free_known = false;
  std::uint64_t stream = 0;
  std::string where;  // "event 12" or "line 40": where the file records it
};

/// An action the reader does not replay, and how often the file has it.
struct unknown_action {
  std::string name;
  std::size_t count = 0;
  std::string first;  // where it first appears, as in recorded_failure
};

/// A GPU kernel of a profiler trace: when the host launched it, when it
/// started on the GPU and how long it ran (ns, on the file's clock).
struct gpu_kernel {
  std::int64_t launch_ns = 0;
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
};

/// A host wait for queued work in a profiler trace (a synchronize call):
/// when it began and when it returned (ns, on the file's clock).
struct host_wait {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct alloc_trace {
  std::string source;           // the file
  std::string format;           // pytorch_snapshot, strata_trace, rmm_csv, lifetime_csv
  std::vector<trace_op> seeds;  // live before the first op: allocated first
  std::vector<trace_op> ops;
  /// The recording allocator's reserved bytes after each op (same length as
  /// ops), and its peak; empty / 0 when the file has no segment events.
  std::vector<std::uint64_t> baseline_reserved;
  std::uint64_t baseline_peak = 0;
  /// Stack frames ("function (file:line)"), innermost user frame first.
  std::vector<std::vector<std::string>> frames;
  std::vector<recorded_failure> failures;  // in order of before_op
  std::vector<unknown_action> unknown_actions;
  /// Every op carries the time the recording made it (ns, on the file's
  /// clock; never decreasing): what `strata replay --timeline` paces by.
  bool timed = false;
  /// A profiler trace's GPU kernels, by launch time, and the host's waits
  /// for them, by start: how far the GPU ran behind (empty otherwise).
  std::vector<gpu_kernel> kernels;
  std::vector<host_wait> waits;
};

/// Whether the recording allocator already held at least half its peak
/// reserved bytes at the trace's first op: the recorded process had its
/// memory before the trace began (a profiler trace of later steps, a
/// snapshot whose history starts mid-run). False without a baseline.
/// Thread safety: a pure function.
[[nodiscard]] bool starts_warm(const alloc_trace& t) noexcept;

/// Counts `name` in `t.unknown_actions` (first seen at `where`).
void count_unknown_action(alloc_trace& t, std::string_view name, const std::string& where);

/// Reads `path` (format detected from its contents; a UTF-8 byte order mark
/// before a text format is skipped). `device_index` picks the device trace
/// of a PyTorch snapshot. Errors: a path that is not a regular file or a
/// pipe, a file over max_trace_file_bytes, an empty file, and every reader's.
result<alloc_trace> read_trace(const std::string& path, int device_index);

/// Each reader, on the file's bytes. `source` names the file in errors.
result<alloc_trace> read_pytorch_snapshot(std::string_view bytes, const std::string& source,
                                          int device_index);
result<alloc_trace> read_strata_trace_json(std::string_view text, const std::string& source);
result<alloc_trace> read_rmm_csv(std::string_view text, const std::string& source);
result<alloc_trace> read_lifetime_csv(std::string_view text, const std::string& source);
result<alloc_trace> read_profiler_trace(std::string_view text, const std::string& source,
                                        int device_index);
/// The decompressed bytes of an xz file. Errors: invalid_argument for a
/// corrupt or truncated file or one over max_trace_file_bytes decompressed.
result<std::string> decompress_xz(std::string_view bytes, const std::string& source);

}  // namespace strata::replay
