#include "replayer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <unordered_map>

#include "expandable_cost.hpp"
#include "second_thread.hpp"
#include "step_cycle.hpp"

namespace strata::replay {

namespace {

struct held {
  void* ptr;
  live_block block;
};

// One replay of `trace` up to `stop_after` ops on a fresh allocator.
class run {
 public:
  // With `two_threads`, a trace that records frames has its calls without
  // frames issued from a second thread (PyTorch records no Python frames
  // for its autograd thread's calls: the backward pass's).
  run(const alloc_trace& trace, allocator& a, bool two_threads) : trace_(trace), a_(a) {
    if (two_threads && std::any_of(trace.ops.begin(), trace.ops.end(), [](const trace_op& op) {
          return op.frames != trace_op::no_frames;
        })) {
      other_ = std::make_unique<second_thread>();
    }
  }

  // Replays; `on_op` is called after each op with the count so far. With
  // `pacer`, each op at its recorded time (the seeds before the clock starts).
  // `warmup` passes over every op come first, untimed and unsampled.
  template <class OnOp>
  status go(std::size_t stop_after, bool timed, OnOp on_op, timeline_pacer* pacer = nullptr,
            std::size_t warmup = 0) {
    for (std::size_t i = 0; i < trace_.seeds.size(); ++i) {
      if (auto st = allocate(trace_.seeds[i], 0, false); !st) {
        return at_event("seed " + std::to_string(i), st);
      }
    }
    for (std::size_t pass = 0; pass < warmup; ++pass) {
      for (std::size_t i = 0; i < trace_.ops.size(); ++i) {
        if (auto st = replay_op(i, false); !st) {
          return at_event("warm-up, event " + std::to_string(i), st);
        }
      }
      ooms.clear();  // the measured pass's OOMs are the ones reported
    }
    if (warmup > 0) warmed = a_.counters();
    if (pacer != nullptr) pacer->start();
    const std::size_t n = std::min(stop_after, trace_.ops.size());
    std::size_t next_failure = 0;
    const auto ask_failures = [&](std::size_t before) -> status {
      for (; next_failure < trace_.failures.size() &&
             trace_.failures[next_failure].before_op <= before;
           ++next_failure) {
        const recorded_failure& f = trace_.failures[next_failure];
        memory_info m{};
        try {
          m = a_.available_memory();  // asks without allocating
        } catch (const error& e) {
          return at_event(f.where, e.to_status());
        }
        failures.push_back({f, m.free, m.free >= f.size});
      }
      return {};
    };
    for (std::size_t i = 0; i < n; ++i) {
      if (auto st = ask_failures(i); !st) return st;
      if (pacer != nullptr) {
        if (auto st = pacer->before(i); !st) return at_event("event " + std::to_string(i), st);
      }
      const driver_call_totals before = a_.dev().call_totals();
      if (auto st = replay_op(i, timed); !st) return at_event("event " + std::to_string(i), st);
      if (timed) note_cost(i, before, pacer != nullptr && i >= pacer->tail_op());
      if (pacer != nullptr) pacer->after(i);
      on_op(i + 1);
    }
    if (n < trace_.ops.size()) return {};
    return ask_failures(n);
  }

  /// The threads the calls come from: 2 with a second thread.
  [[nodiscard]] std::size_t threads() const noexcept { return other_ ? 2 : 1; }

  std::unordered_map<std::uint64_t, held> live;
  std::uint64_t live_bytes = 0;
  std::vector<std::uint32_t> call_ns;
  std::vector<replay_oom> ooms;
  std::vector<replay_failure> failures;
  allocator_stats warmed{};            // the counters after the warm-up passes (zero without)
  std::vector<costly_call> costliest;  // replay_result::costliest
  std::vector<costly_call> costliest_second_half;

 private:
  // Keeps op `i` among the costliest (and, in the second half, among its
  // costliest) if the driver calls made since `before` cost enough.
  void note_cost(std::size_t i, const driver_call_totals& before, bool second_half) {
    const driver_call_totals after = a_.dev().call_totals();
    costly_call c{i, second_half, 0, 0};
    for (std::size_t k = 0; k < driver_call_kinds; ++k) {
      c.driver_calls += after[k].calls - before[k].calls;
      c.driver_ns += after[k].ns - before[k].ns;
    }
    if (c.driver_calls == 0) return;
    keep_costliest(costliest, c);
    if (second_half) keep_costliest(costliest_second_half, c);
  }

  static void keep_costliest(std::vector<costly_call>& v, const costly_call& c) {
    const auto at = std::upper_bound(
        v.begin(), v.end(), c,
        [](const costly_call& x, const costly_call& y) { return x.driver_ns > y.driver_ns; });
    if (at == v.end() && v.size() == costliest_kept) return;
    v.insert(at, c);
    if (v.size() > costliest_kept) v.pop_back();
  }

  status at_event(const std::string& where, const status& st) const {
    return {st.code(), trace_.source + ": " + where + ": " + st.message()};
  }

  result<void*> stream_of(std::uint64_t recorded) {
    if (recorded == 0) return static_cast<void*>(nullptr);
    auto it = streams_.find(recorded);
    if (it != streams_.end()) return it->second;
    if (streams_.size() == max_replay_streams) {
      return status{errc::invalid_argument, "the trace uses more than " +
                                                std::to_string(max_replay_streams) +
                                                " streams (the most a replay creates)"};
    }
    auto s = a_.dev().create_stream();
    if (!s) return s.error();
    streams_.emplace(recorded, s->native);
    return s->native;
  }

  // Op `i` of the trace, an allocation or a free.
  status replay_op(std::size_t i, bool timed) {
    const trace_op& op = trace_.ops[i];
    if (op.kind == op_kind::alloc) return allocate(op, i, timed);
    free(op, timed);
    return {};
  }

  status allocate(const trace_op& op, std::size_t index, bool timed) {
    auto stream = stream_of(op.stream);
    if (!stream) return stream.error();
    if (op.size == 0) return {};
    // The recording could not hand out a live address: the block there (a
    // warm-up pass's, or one whose free the trace lost) was freed before.
    if (auto old = live.find(op.addr); old != live.end()) release(old, false);
    result<void*> p = static_cast<void*>(nullptr);
    std::chrono::steady_clock::duration took{};
    on_thread_of(op, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      p = a_.try_malloc_async(op.size, *stream);
      took = std::chrono::steady_clock::now() - t0;
    });
    if (timed) call_ns.push_back(static_cast<std::uint32_t>(took.count()));
    if (!p) {
      if (p.code() != errc::out_of_memory) return p.error();
      ooms.push_back({index, op.size, a_.last_oom_report(), p.error().message()});
      return {};
    }
    live[op.addr] = {*p, {op.size, op.stream, index, op.frames}};
    live_bytes += op.size;
    return {};
  }

  void free(const trace_op& op, bool timed) {
    auto it = live.find(op.addr);
    if (it != live.end()) release(it, timed, &op);  // else its allocation failed (an OOM)
  }

  // Frees `it`'s block, from the thread of `op` (the free's own event;
  // null: this thread).
  void release(std::unordered_map<std::uint64_t, held>::iterator it, bool timed,
               const trace_op* op = nullptr) {
    auto stream = stream_of(it->second.block.stream);
    std::chrono::steady_clock::duration took{};
    const auto call = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      (void)a_.try_free_async(it->second.ptr, stream ? *stream : nullptr);
      took = std::chrono::steady_clock::now() - t0;
    };
    if (op != nullptr) {
      on_thread_of(*op, call);
    } else {
      call();
    }
    if (timed) call_ns.push_back(static_cast<std::uint32_t>(took.count()));
    live_bytes -= it->second.block.size;
    live.erase(it);
  }

  // Runs `call` on the thread `op` was recorded on. The calls are issued
  // one at a time, in order: on a timing-only device the modeled time goes
  // with them from one thread to the other.
  template <class Call>
  void on_thread_of(const trace_op& op, const Call& call) {
    if (other_ == nullptr || op.frames != trace_op::no_frames) {
      call();
      return;
    }
    device& dev = a_.dev();
    const result<double> here = dev.modeled_clock();  // not_supported: real time
    result<double> there = here;
    other_->run([&] {
      if (here) (void)dev.advance_modeled_clock(*here);
      call();
      if (here) there = dev.modeled_clock();
    });
    if (there) (void)dev.advance_modeled_clock(*there);
  }

  const alloc_trace& trace_;
  allocator& a_;
  std::unordered_map<std::uint64_t, void*> streams_;
  std::unique_ptr<second_thread> other_;  // null: every call from this thread
};

result<std::unique_ptr<allocator>> make_allocator(const replay_options& o,
                                                  const alloc_trace& trace) {
  allocator_options defaults;
  defaults.device = o.device;
  if (o.timeline) {
    auto spec = timeline_device(o.device, o.gpu_lag_ms, trace);
    if (!spec) return status{errc::invalid_argument, "--device: " + spec.error().message()};
    defaults.device = *spec;
  }
  defaults.log_ooms = false;  // the report lists every OOM
  auto options = parse_allocator_conf(o.conf, defaults);
  if (!options) return status{errc::invalid_argument, "--conf: " + options.error().message()};
  if (options->device != defaults.device) {
    return status{errc::invalid_argument, "--conf: give the device with --device, not device:"};
  }
  if (o.snapshot) {
    // Room for every call and the segment events between them.
    const std::uint64_t calls = 2 * (trace.seeds.size() + trace.ops.size()) + 1024;
    options->trace_buffer =
        std::min<std::uint64_t>(std::max(options->trace_buffer, 2 * calls), std::uint64_t{1} << 26);
  }
  try {
    return std::make_unique<allocator>(*options);
  } catch (const error& e) {
    return status{e.code(), "--device: " + e.message()};
  }
}

// The mean of the last `n` entries of `v` (all of them if fewer); 0 if none.
double mean_of_last(const std::vector<std::uint32_t>& v, std::size_t n) {
  n = std::min(n, v.size());
  if (n == 0) return 0;
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) /
         static_cast<double>(n);
}

double percentile(std::vector<std::uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

class progress_bar {
 public:
  progress_bar(bool on, std::size_t total) : on_(on && isatty(STDERR_FILENO) != 0), total_(total) {}
  void update(std::size_t done) {
    if (!on_ || total_ == 0) return;
    const std::size_t pct = done * 100 / total_;
    if (pct == last_) return;
    last_ = pct;
    const std::string bar(pct / 4, '#');
    std::fprintf(stderr, "\rreplaying [%-25s] %3zu%%", bar.c_str(), pct);
    if (done == total_) std::fputc('\n', stderr);
  }

 private:
  bool on_;
  std::size_t total_;
  std::size_t last_ = 101;
};

// The trace, then its last step `options.steady_repeats` times more (fewer
// where that would add over max_repeated_ops), on a fresh allocator at the
// trace's pace: what the last half of the repeats added, in `out`.
status replay_steady_state(const alloc_trace& trace, const replay_options& options,
                           timeline_result::steady_state& out) {
  out.tried = true;
  const std::optional<step_cycle> step = find_last_step(trace);
  if (!step) return {};
  out.step_ops = step->ops;
  const std::size_t repeats = repeats_within_bound(*step, options.steady_repeats);
  if (repeats == 0) return {};  // a step too long to repeat
  const alloc_trace longer = with_step_repeated(trace, *step, repeats);
  replay_options plain = options;
  plain.snapshot = false;
  auto made = make_allocator(plain, longer);
  if (!made) return made.error();
  run steady(longer, **made, options.autograd_thread);
  const std::size_t measured = (repeats + 1) / 2;
  const std::size_t tail_op = trace.ops.size() + (repeats - measured) * step->ops;
  timeline_pacer pacer((*made)->dev(), longer, options.gpu_lag_ms, tail_op);
  std::uint64_t peak_live = 0;
  allocator_stats at_tail{};  // the counters where the measured repeats begin
  if (auto s = steady.go(
          longer.ops.size(), true,
          [&](std::size_t done) {
            peak_live = std::max(peak_live, steady.live_bytes);
            if (done == tail_op) at_tail = (*made)->counters();
          },
          &pacer, options.warmup.value_or(0));
      !s) {
    return s;
  }
  auto t = pacer.finish();
  if (!t) return status{t.error().code(), trace.source + ": " + t.error().message()};
  out.found = true;
  out.step_ms = static_cast<double>(step->span_ns) * 1e-6;
  out.repeats = repeats;
  out.measured = measured;
  out.measured_ms = static_cast<double>(measured) * out.step_ms;
  out.added_ms = t->second_half_added_ms;
  out.driver_calls = t->second_half_driver_calls;
  out.cpu_ns_per_call = mean_of_last(steady.call_ns, measured * step->ops);
  const allocator_stats at_end = (*made)->counters();
  out.locked_calls = static_cast<std::uint64_t>(at_end.num_locked_calls - at_tail.num_locked_calls);
  out.locked_call_ns = static_cast<std::uint64_t>(at_end.locked_call_ns - at_tail.locked_call_ns);
  out.peak_live = peak_live;
  out.peak_reserved = static_cast<std::uint64_t>(at_end.reserved_bytes[pool_all].peak);
  return {};
}

// The timeline's view of the PyTorch models' growths (timeline_result).
void price_pytorch(const replay_options& o, const alloc_trace& trace,
                   const pytorch_allocator_model& native, const pytorch_allocator_model& expandable,
                   timeline_result& t) {
  t.native_mallocs = native.growths().size();
  for (const auto& g : expandable.growths()) t.expandable_pages += g.bytes / g.page;
  auto spec = timeline_device(o.device, o.gpu_lag_ms, trace);
  if (!spec) return;
  // Unpriced where the device cannot hold the model's pages (a trace
  // larger than the device) or its pages are not whole device pages.
  if (const auto ms = expandable_map_ms(*spec, expandable.growths())) t.expandable_map_ms = *ms;
}

}  // namespace

pytorch_allocator_model run_pytorch_model(const alloc_trace& trace, pytorch_allocator_model::mode m,
                                          std::size_t passes) {
  pytorch_allocator_model model(m);
  std::unordered_map<std::uint64_t, std::uint32_t> live;
  const auto allocate = [&](const trace_op& op) {
    if (op.size == 0) return;
    if (auto old = live.find(op.addr); old != live.end()) model.free(old->second);  // as replayed
    live[op.addr] = model.allocate(op.size);
  };
  for (const trace_op& op : trace.seeds) allocate(op);
  for (std::size_t pass = 0; pass < std::max<std::size_t>(1, passes); ++pass) {
    if (pass > 0) model.forget_growths();
    for (const trace_op& op : trace.ops) {
      if (op.kind == op_kind::alloc) {
        allocate(op);
      } else if (auto it = live.find(op.addr); it != live.end()) {
        model.free(it->second);
        live.erase(it);
      }
    }
  }
  return model;
}

std::uint64_t modeled_peak_reserved(const alloc_trace& trace, pytorch_allocator_model::mode m) {
  return run_pytorch_model(trace, m).peak_reserved();
}

result<replay_result> replay(const alloc_trace& trace, const replay_options& options_in) {
  replay_options options = options_in;  // with the warm-up passes decided
  options.warmup = options_in.warmup.value_or(options_in.timeline && starts_warm(trace) ? 1 : 0);
  if (*options.warmup > max_warmup) {
    return status{errc::invalid_argument, "--warmup: at most " + std::to_string(max_warmup)};
  }
  if (options.steady_repeats > max_steady_repeats) {
    return status{errc::invalid_argument,
                  "--steady-steps: at most " + std::to_string(max_steady_repeats)};
  }
  if (options.timeline && !trace.timed && !trace.ops.empty()) {
    return status{errc::invalid_argument,
                  trace.source + ": --timeline needs the time of every call, which this " +
                      trace.format + " does not record"};
  }
  auto made = make_allocator(options, trace);
  if (!made) return made.error();
  allocator& a = **made;
  replay_result r;
  r.device = a.dev().name();
  r.granularity = a.dev().granularity();

  // Pass 1: everything, sampled.
  run first(trace, a, options.autograd_thread);
  r.threads = first.threads();
  r.warmup = *options.warmup;
  r.warmup_automatic = !options_in.warmup.has_value() && r.warmup > 0;
  const std::size_t n = trace.ops.size();
  const std::size_t every = std::max<std::size_t>(1, n / 2000);
  progress_bar bar(options.progress, n);
  std::uint64_t reserved_peak = 0;
  const auto sample = [&](std::size_t done) {
    const allocator_stats s = a.counters();
    const auto reserved = static_cast<std::uint64_t>(s.reserved_bytes[pool_all].current);
    if (reserved > reserved_peak) {
      reserved_peak = reserved;
      r.peak_op = done;
    }
    r.peak_live = std::max(r.peak_live, first.live_bytes);
    if (done % every == 0 || done == n) {
      r.samples.push_back(
          {done, first.live_bytes, static_cast<std::uint64_t>(s.allocated_bytes[pool_all].current),
           reserved,
           trace.baseline_reserved.empty() || done == 0 ? 0 : trace.baseline_reserved[done - 1]});
    }
    bar.update(done);
  };
  std::unique_ptr<timeline_pacer> pacer;
  if (options.timeline)
    pacer = std::make_unique<timeline_pacer>(a.dev(), trace, options.gpu_lag_ms);
  if (auto s = first.go(n, true, sample, pacer.get(), *options.warmup); !s) return s;
  if (n == 0) sample(0);
  const allocator_stats end = a.counters();
  // The measured pass's waits and driver calls (the seeds' too, without warm-up).
  r.device_waits = end.num_device_waits - first.warmed.num_device_waits;
  r.device_wait_ms = static_cast<double>(end.device_wait_ns - first.warmed.device_wait_ns) * 1e-6;
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    r.driver[k].calls = end.driver[k].calls - first.warmed.driver[k].calls;
    r.driver[k].ns = end.driver[k].ns - first.warmed.driver[k].ns;
  }
  if (pacer != nullptr) {
    auto t = pacer->finish();
    if (!t) return status{t.error().code(), trace.source + ": " + t.error().message()};
    r.timeline = *t;
    r.timeline.wait_ms = r.device_wait_ms;
  }
  r.events = trace.seeds.size() + n;
  r.peak_allocated = static_cast<std::uint64_t>(end.allocated_bytes[pool_all].peak);
  r.peak_reserved = static_cast<std::uint64_t>(end.reserved_bytes[pool_all].peak);
  r.fragmentation = end.peak_fragmentation();
  r.stitches = end.num_stitches;
  r.stitched_bytes = end.stitched_bytes;
  r.ooms = std::move(first.ooms);
  r.failures = std::move(first.failures);
  r.costliest = std::move(first.costliest);
  r.costliest_second_half = std::move(first.costliest_second_half);
  if (options.snapshot) r.snapshot_pickle = a.snapshot_pickle();
  r.calls = first.call_ns.size();
  r.cpu_ns_median = percentile(first.call_ns, 0.5);
  r.cpu_ns_p99 = percentile(first.call_ns, 0.99);
  r.cpu_ns_mean = mean_of_last(first.call_ns, first.call_ns.size());
  r.has_baseline = !trace.baseline_reserved.empty();
  r.baseline_peak_reserved = trace.baseline_peak;
  const std::size_t passes = *options.warmup + 1;
  const pytorch_allocator_model native =
      run_pytorch_model(trace, pytorch_allocator_model::mode::native, passes);
  const pytorch_allocator_model expandable =
      run_pytorch_model(trace, pytorch_allocator_model::mode::expandable, passes);
  r.modeled_native_peak = native.peak_reserved();
  r.modeled_expandable_peak = expandable.peak_reserved();
  if (r.timeline.on) price_pytorch(options, trace, native, expandable, r.timeline);
  made->reset();
  if (options.timeline && options.steady_repeats > 0) {
    auto s = replay_steady_state(trace, options, r.timeline.steady);
    if (!s) return s;
  }

  // Pass 2: up to the peak, then the page map and the largest live blocks.
  replay_options plain = options;
  plain.snapshot = false;
  auto again = make_allocator(plain, trace);
  if (!again) return again.error();
  run second(trace, **again, options.autograd_thread);
  if (auto s = second.go(
          r.peak_op, false, [](std::size_t) {}, nullptr, *options.warmup);
      !s) {
    return s;
  }
  r.page_map_at_peak = (*again)->page_map();
  for (const auto& [addr, h] : second.live) r.largest_at_peak.push_back(h.block);
  const std::size_t top = std::min<std::size_t>(10, r.largest_at_peak.size());
  std::partial_sort(r.largest_at_peak.begin(),
                    r.largest_at_peak.begin() + static_cast<std::ptrdiff_t>(top),
                    r.largest_at_peak.end(),
                    [](const live_block& x, const live_block& y) { return x.size > y.size; });
  r.largest_at_peak.resize(top);
  return r;
}

}  // namespace strata::replay
