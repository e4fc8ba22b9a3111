#include "timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::replay {

namespace {

// The calls of `kind` made between `before` and `after`.
driver_call_total since(const driver_call_totals& after, const driver_call_totals& before,
                        driver_call kind) {
  const auto k = static_cast<std::size_t>(kind);
  return {after[k].calls - before[k].calls, after[k].ns - before[k].ns};
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", ms);
  return buf;
}

}  // namespace

result<std::string> timeline_device(const std::string& spec, double gpu_lag_ms,
                                    const alloc_trace& trace) {
  if (spec != "sim" && !spec.starts_with("sim:")) {
    return status{
        errc::invalid_argument,
        "--timeline replays on a sim device (it keeps the modeled clock), not '" + spec + "'"};
  }
  if (spec.find("data=host") != std::string::npos) {
    return status{errc::invalid_argument,
                  "--timeline needs a timing-only sim device (data=none), not data=host"};
  }
  if (!std::isfinite(gpu_lag_ms) || gpu_lag_ms < 0 || gpu_lag_ms > 10'000) {
    return status{errc::invalid_argument, "--gpu-lag-ms must be 0 to 10000"};
  }
  std::string out = spec == "sim" ? "sim:" : spec + ",";
  if (spec.find("data=") == std::string::npos) out += "data=none,";
  if (trace.kernels.empty() && spec.find("gpu_lag_us=") == std::string::npos) {
    out += "gpu_lag_us=" + std::to_string(std::llround(gpu_lag_ms * 1000)) + ",";
  }
  out.pop_back();
  return out;
}

timeline_pacer::timeline_pacer(device& dev, const alloc_trace& trace, double gpu_lag_ms)
    // The second half is the second half of the calls: a recording's pace
    // varies (a snapshot taken with stack capture is slow through its first
    // step), and training's steady state is in its later calls.
    : timeline_pacer(dev, trace, gpu_lag_ms, trace.ops.size() / 2) {}

timeline_pacer::timeline_pacer(device& dev, const alloc_trace& trace, double gpu_lag_ms,
                               std::size_t tail_op)
    : dev_(dev), trace_(trace), lag_ms_(gpu_lag_ms) {
  kernels_.reserve(trace.kernels.size());
  if (trace.ops.empty()) return;
  t0_ = trace.ops.front().time_ns;
  end_ns_ = trace.ops.back().time_ns;
  for (const gpu_kernel& k : trace.kernels) end_ns_ = std::max(end_ns_, k.start_ns + k.duration_ns);
  tail_op_ = std::min(tail_op, trace.ops.size() - 1);
  tail_ns_ = trace.ops[tail_op_].time_ns;
}

void timeline_pacer::start() {
  base_ = dev_.host_clock();
  delay_ = 0;
  start_totals_ = dev_.call_totals();
}

status timeline_pacer::advance_to(double trace_seconds) {
  return dev_.advance_modeled_clock(std::max(0.0, base_ + trace_seconds + delay_));
}

void timeline_pacer::mark_tail() {
  tail_marked_ = true;
  tail_delay_ = delay_;
  tail_calls_ = memory_call_total(dev_.call_totals()).calls;
}

status timeline_pacer::queue_until(std::int64_t ns) {
  const auto& ks = trace_.kernels;
  const auto& ws = trace_.waits;
  while (true) {
    const bool kernel = next_kernel_ < ks.size() && ks[next_kernel_].launch_ns <= ns;
    const bool wait = next_wait_ < ws.size() && ws[next_wait_].start_ns <= ns;
    if (!kernel && !wait) return {};
    if (kernel && (!wait || ks[next_kernel_].launch_ns <= ws[next_wait_].start_ns)) {
      const gpu_kernel& k = ks[next_kernel_++];
      if (auto s = advance_to(trace_s(k.launch_ns)); !s) return s;
      // The kernel starts no earlier than it did, than its (delayed)
      // launch, nor than the stream's earlier work ends.
      kernels_.push_back({base_ + trace_s(k.start_ns), static_cast<double>(k.duration_ns) * 1e-9});
      const auto run = [](void* arg, double start) {
        const auto* mk = static_cast<const modeled_kernel*>(arg);
        return std::max(start, mk->start) + mk->duration;
      };
      if (auto s = dev_.launch_timed_host_fn({}, run, &kernels_.back()); !s) return s;
    } else {
      if (auto s = replay_wait(ws[next_wait_++]); !s) return s;
    }
  }
}

status timeline_pacer::replay_wait(const host_wait& w) {
  if (auto s = advance_to(trace_s(w.start_ns)); !s) return s;
  if (auto s = dev_.synchronize_stream({}); !s) return s;
  // The wait returned when the (delayed) GPU work did: a delay the GPU
  // hid is gone, one that held the GPU up remains.
  delay_ = std::max(0.0, dev_.host_clock() - base_ - trace_s(w.end_ns));
  return {};
}

status timeline_pacer::before(std::size_t i) {
  const std::int64_t t = trace_.ops[i].time_ns;
  if (auto s = queue_until(t); !s) return s;
  if (!tail_marked_ && i >= tail_op_) mark_tail();
  return advance_to(trace_s(t));
}

void timeline_pacer::after(std::size_t i) {
  delay_ = std::max(delay_, dev_.host_clock() - base_ - trace_s(trace_.ops[i].time_ns));
}

result<timeline_result> timeline_pacer::finish() {
  timeline_result r;
  r.on = true;
  r.gpu = trace_.kernels.empty()
              ? "runs " + ms_text(lag_ms_) + " ms behind the host"
              : "runs the trace's " + std::to_string(trace_.kernels.size()) + " kernels";
  if (trace_.ops.empty()) return r;
  if (!tail_marked_) mark_tail();
  if (auto s = queue_until(INT64_MAX); !s) return s;
  double added = delay_;
  if (!trace_.kernels.empty()) {
    // The program ends when its last kernel does: how much later than recorded.
    if (auto s = dev_.synchronize_stream({}); !s) return s;
    added = std::max(added, dev_.host_clock() - base_ - trace_s(end_ns_));
  }
  const driver_call_totals now = dev_.call_totals();
  const driver_call_total start = memory_call_total(start_totals_);
  const driver_call_total all = memory_call_total(now);
  // Each created run once: its create, and one map and its share of
  // set_access at what a map call and the opening after it cost here on
  // average (one map call maps one run; set_access is charged per run it
  // opens).
  const driver_call_total created = since(now, start_totals_, driver_call::create_pages);
  const driver_call_total mapped = since(now, start_totals_, driver_call::map);
  const driver_call_total opened = since(now, start_totals_, driver_call::set_access);
  r.runs_created = created.calls;
  if (mapped.calls > 0) {
    const double per_page =
        static_cast<double>(mapped.ns + opened.ns) / static_cast<double>(mapped.calls);
    r.first_map_ms =
        (static_cast<double>(created.ns) + per_page * static_cast<double>(created.calls)) * 1e-6;
  }
  r.trace_ms = trace_s(end_ns_) * 1e3;
  r.added_ms = added * 1e3;
  r.second_half_trace_ms = (trace_s(end_ns_) - trace_s(tail_ns_)) * 1e3;
  // Both delays are differences of clock readings in seconds: what is left
  // under a nanosecond (the clocks' resolution) is rounding, not delay.
  const double second_half = added - tail_delay_;
  r.second_half_added_ms = second_half < 1e-9 ? 0.0 : second_half * 1e3;
  r.driver_calls = all.calls - start.calls;
  r.second_half_driver_calls = all.calls - tail_calls_;
  r.driver_ms = static_cast<double>(all.ns - start.ns) * 1e-6;
  return r;
}

}  // namespace strata::replay
