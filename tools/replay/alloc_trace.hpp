// An allocation trace, whatever file it came from: blocks live before the
// trace starts (seeds), then allocations and frees in order, and, where the
// recording allocator's segment events were in the file, its reserved bytes
// over time (the baseline Strata is compared with).
//
// read_trace() reads, directly and without a conversion step:
//   - PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles,
//     PyTorch 2.0 and later), and Strata's own snapshot_pickle() exports;
//   - Strata's event trace JSON (trace_json());
//   - RMM logging CSV (Thread,Time,Action,Pointer,Size,Stream);
//   - buffer-lifetime CSV (id,lower,upper,size).
// Errors name the file and the line, byte offset or event index.
//
// Thread safety: plain values; read_trace is reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/error.hpp"

namespace strata::replay {

enum class op_kind : std::uint8_t { alloc, free };

struct trace_op {
  static constexpr std::uint32_t no_frames = 0xffffffff;
  op_kind kind = op_kind::alloc;
  std::uint64_t addr = 0;            // the recording's address: a key, never dereferenced
  std::uint64_t size = 0;            // bytes requested (alloc); the block's size (free)
  std::uint64_t stream = 0;          // the recording's stream handle, 0 = default stream
  std::uint32_t frames = no_frames;  // index into alloc_trace::frames
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
};

/// Reads `path` (format detected from its contents). `device_index` picks
/// the device trace of a PyTorch snapshot.
result<alloc_trace> read_trace(const std::string& path, int device_index);

/// Each reader, on the file's bytes. `source` names the file in errors.
result<alloc_trace> read_pytorch_snapshot(std::string_view bytes, const std::string& source,
                                          int device_index);
result<alloc_trace> read_strata_trace_json(std::string_view text, const std::string& source);
result<alloc_trace> read_rmm_csv(std::string_view text, const std::string& source);
result<alloc_trace> read_lifetime_csv(std::string_view text, const std::string& source);

}  // namespace strata::replay
