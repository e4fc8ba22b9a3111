// `strata replay --timeline`: the replay paced by the trace's own clock on
// a timing-only sim device, with the GPU running behind the host, so that
// what the allocator costs a training job shows as time (docs/replay.md,
// "Timeline").
//
// The model: the program makes each allocator call at its recorded time
// plus the delay so far; a call's modeled cost (driver calls at their
// measured price, host waits for queued work until the device's modeled
// clock gets there) adds to the delay, which every later call inherits.
// The GPU runs behind the host: by the recorded kernels of a profiler trace
// (each starts no earlier than it did, nor than its delayed launch, nor
// than its predecessor's delayed end) or, without them, by a fixed lag
// (sim key gpu_lag_us). A host wait the recording made (a synchronize)
// ends when the delayed GPU work it waited for ends, so a delay the GPU
// could hide is absorbed there.
//
// Thread safety: one pacer per replay thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "alloc_trace.hpp"
#include "strata/device.hpp"

namespace strata::replay {

/// What the allocator added to the trace's time.
struct timeline_result {
  bool on = false;
  std::string gpu;  // how the GPU runs behind: "lag 12 ms" or "N recorded kernels"
  double trace_ms = 0;
  double added_ms = 0;
  double second_half_trace_ms = 0;
  double second_half_added_ms = 0;
  std::uint64_t driver_calls = 0;  // memory driver calls (reserve ... set_access)
  std::uint64_t second_half_driver_calls = 0;
  double driver_ms = 0;  // their time
  double wait_ms = 0;    // the host's waits for queued work (event and stream synchronizations)
  // Creating, mapping and opening each physical run the replay created
  // once: what any allocator that maps runs of those sizes pays for them,
  // however it places blocks. Strata's runs are one page unless
  // `page_run_size` says otherwise; larger runs, and cudaMalloc, PyTorch's
  // default allocator's source, cost less per page (docs/replay.md).
  std::uint64_t runs_created = 0;
  double first_map_ms = 0;
  // PyTorch's allocator given the same requests over the same pass,
  // modeled (replayer.hpp, run_pytorch_model). With expandable segments:
  // the pages it created and mapped and their driver time at this
  // device's prices (expandable_cost.hpp; none when they could not be
  // priced). By default: its cudaMalloc calls, not priced (the calibration
  // timed one size only: 0.24-0.32 ms for 64 MiB on an H100).
  std::uint64_t expandable_pages = 0;
  std::optional<double> expandable_map_ms;
  std::uint64_t native_mallocs = 0;

  [[nodiscard]] double added_fraction() const { return trace_ms > 0 ? added_ms / trace_ms : 0; }
  [[nodiscard]] double first_map_fraction() const {
    return trace_ms > 0 ? first_map_ms / trace_ms : 0;
  }
  /// expandable_map_ms over the trace (0 when not priced).
  [[nodiscard]] double expandable_map_fraction() const {
    return trace_ms > 0 ? expandable_map_ms.value_or(0) / trace_ms : 0;
  }
  [[nodiscard]] double second_half_added_fraction() const {
    return second_half_trace_ms > 0 ? second_half_added_ms / second_half_trace_ms : 0;
  }
  // The steady state (replay_options::steady_repeats, step_cycle.hpp): the
  // trace's last step repeated after it, and what the last repeats added.
  struct steady_state {
    bool tried = false;                // repeats were asked for
    bool found = false;                // the trace ends in a repeated step, and it was repeated
    std::size_t step_ops = 0;          // the step's calls (found, or too long to repeat)
    double step_ms = 0;                // its recorded span
    std::size_t repeats = 0;           // replayed after the trace
    std::size_t measured = 0;          // the last ones, measured
    double measured_ms = 0;            // their recorded time
    double added_ms = 0;               // what the allocator added over them
    std::uint64_t driver_calls = 0;    // memory driver calls made in them
    double cpu_ns_per_call = 0;        // the mean wall time of their calls (the host's cost)
    std::uint64_t locked_calls = 0;    // of them, those the thread caches did not serve
    std::uint64_t locked_call_ns = 0;  // and their wall time (num_locked_calls, locked_call_ns)
    std::uint64_t peak_live = 0;       // over the trace and the repeats (bytes)
    std::uint64_t peak_reserved = 0;   // Strata's, over the same
    [[nodiscard]] double added_fraction() const {
      return measured_ms > 0 ? added_ms / measured_ms : 0;
    }
    /// The share of the measured calls that took the allocator's lock.
    [[nodiscard]] double locked_fraction() const {
      const auto calls = static_cast<double>(measured * step_ops);
      return calls > 0 ? static_cast<double>(locked_calls) / calls : 0;
    }
    /// The mean wall time of a locked call (ns).
    [[nodiscard]] double ns_per_locked_call() const {
      return locked_calls > 0
                 ? static_cast<double>(locked_call_ns) / static_cast<double>(locked_calls)
                 : 0;
    }
  } steady;
};

/// The device spec a timeline replays on: `spec` (a sim device) made
/// timing only, with the GPU `gpu_lag_ms` behind unless the trace has
/// kernels. Errors: invalid_argument for a device other than sim, or a sim
/// device with data.
result<std::string> timeline_device(const std::string& spec, double gpu_lag_ms,
                                    const alloc_trace& trace);

class timeline_pacer {
 public:
  /// `dev` is the timing-only device the replay allocates on; the trace's
  /// kernels run on its default stream, in launch order (a profiler trace
  /// with kernels on several streams is serialized onto one). The result's
  /// `second_half_*` fields count from op `tail_op` on (default: the
  /// second half of the ops).
  timeline_pacer(device& dev, const alloc_trace& trace, double gpu_lag_ms);
  timeline_pacer(device& dev, const alloc_trace& trace, double gpu_lag_ms, std::size_t tail_op);

  /// The op the result's `second_half_*` fields count from.
  [[nodiscard]] std::size_t tail_op() const noexcept { return tail_op_; }
  /// Starts the clock (after the seeds): the trace's first op is now.
  void start();
  /// Before op `i`: queues the kernels launched and replays the waits made
  /// before it, then moves the host to the op's recorded time plus the delay.
  status before(std::size_t i);
  /// After op `i`: what the call took beyond its recorded time is delay.
  void after(std::size_t i);
  /// After the last op: the kernels and waits after it, then the totals.
  result<timeline_result> finish();

 private:
  [[nodiscard]] double trace_s(std::int64_t ns) const {
    return static_cast<double>(ns - t0_) * 1e-9;
  }
  // A recorded kernel in modeled time (see run_kernel in timeline.cpp).
  struct modeled_kernel {
    double start;
    double duration;
  };

  status advance_to(double trace_seconds);
  // Queues the kernels launched, and replays the waits begun, up to `ns`.
  status queue_until(std::int64_t ns);
  status replay_wait(const host_wait& w);
  void mark_tail();

  device& dev_;
  const alloc_trace& trace_;
  double lag_ms_;
  std::int64_t t0_ = 0;
  std::int64_t end_ns_ = 0;   // the last op, or the last kernel's end if later
  std::size_t tail_op_ = 0;   // the first op of the measured tail
  std::int64_t tail_ns_ = 0;  // its recorded time
  double base_ = 0;           // the modeled time of the trace's first op
  double delay_ = 0;          // seconds the host runs behind the recording
  std::size_t next_kernel_ = 0;
  std::size_t next_wait_ = 0;
  bool tail_marked_ = false;
  double tail_delay_ = 0;
  std::uint64_t tail_calls_ = 0;
  driver_call_totals start_totals_{};
  std::vector<modeled_kernel> kernels_;  // reserved up front: launched ones are pointed at
};

}  // namespace strata::replay
