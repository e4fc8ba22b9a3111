// torch.profiler Chrome traces (export_chrome_trace, with
// profile_memory=True): the allocations are the `[memory]` instant events
// (args Addr, Bytes: positive for an allocation, negative for a free;
// Device Type 1 is a CUDA device, Device Id picks it), timed by `ts`
// (microseconds); the GPU's work is the `kernel`, `gpu_memcpy` and
// `gpu_memset` events, each launched by the runtime or driver call with
// the same `correlation`; the host's waits for it are the runtime's and
// driver's synchronize calls (and blocking cudaMemcpy). A file compressed
// with xz is read through liblzma. Blocks freed but never allocated in the
// file were live when it began (seeds). Events are checked like every
// other reader's: a wrong type or an absurd value is an error naming the
// event.
#include <lzma.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "alloc_trace.hpp"
#include "block_ledger.hpp"

namespace strata::replay {

namespace {

using json = nlohmann::json;

constexpr double max_time_us = 9.0e15;  // ns still fit in 63 bits

status bad(const std::string& source, const std::string& where, const std::string& what) {
  return {errc::invalid_argument, source + ": " + (where.empty() ? "" : where + ": ") + what};
}

bool is_wait(std::string_view name) {
  return name.find("Synchronize") != std::string_view::npos || name == "cudaMemcpy" ||
         name == "cuMemcpyDtoH_v2" || name == "cuMemcpyDtoH";
}

bool is_launch(std::string_view name) {
  return name.find("Launch") != std::string_view::npos ||
         name.find("Memset") != std::string_view::npos ||
         name.find("Memcpy") != std::string_view::npos;
}

class profiler_reader {
 public:
  profiler_reader(const std::string& source, int device) : source_(source), device_(device) {}

  result<alloc_trace> read(const json& root) {
    if (!root.is_object() || !root.contains("traceEvents") || !root["traceEvents"].is_array()) {
      return bad(source_, "", "not a profiler trace (no 'traceEvents' array)");
    }
    t_.source = source_;
    t_.format = "profiler_trace";
    const json& events = root["traceEvents"];
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (auto s = event(events[i], i); !s) return s;
    }
    return finish();
  }

 private:
  // ev[key] as a finite number in [lo, hi].
  result<double> number(const json& ev, const char* key, const std::string& where, double lo,
                        double hi) const {
    auto it = ev.find(key);
    if (it == ev.end()) return bad(source_, where, std::string("no '") + key + "'");
    if (!it->is_number()) return bad(source_, where, std::string("'") + key + "' is not a number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) {
      return bad(source_, where, std::string("'") + key + "' is out of range");
    }
    return v;
  }

  status event(const json& ev, std::size_t i) {
    const std::string where = "event " + std::to_string(i);
    if (!ev.is_object()) return bad(source_, where, "is not an object");
    const auto name_it = ev.find("name");
    const auto cat_it = ev.find("cat");
    const std::string name =
        name_it != ev.end() && name_it->is_string() ? name_it->get<std::string>() : "";
    const std::string cat =
        cat_it != ev.end() && cat_it->is_string() ? cat_it->get<std::string>() : "";
    if (name == "[memory]") return memory(ev, where);
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") return gpu_work(ev, where);
    if (cat == "cuda_runtime" || cat == "cuda_driver") return runtime(ev, name, where);
    return {};
  }

  status memory(const json& ev, const std::string& where) {
    auto args = ev.find("args");
    if (args == ev.end() || !args->is_object()) return bad(source_, where, "no 'args'");
    auto type = number(*args, "Device Type", where, 0, 1e6);
    if (!type) return type.error();
    auto id = number(*args, "Device Id", where, -1, 1e6);
    if (!id) return id.error();
    if (*type != 1 || *id != device_) return {};  // another device, or the host
    auto ts = number(ev, "ts", where, 0, max_time_us);
    if (!ts) return ts.error();
    auto addr = number(*args, "Addr", where, 0, 9.2e18);
    if (!addr) return addr.error();
    auto bytes = number(*args, "Bytes", where, -static_cast<double>(max_trace_bytes),
                        static_cast<double>(max_trace_bytes));
    if (!bytes) return bytes.error();
    auto allocated =
        number(*args, "Total Allocated", where, 0, static_cast<double>(max_trace_bytes));
    if (!allocated) return allocated.error();
    auto reserved = number(*args, "Total Reserved", where, 0, static_cast<double>(max_trace_bytes));
    if (!reserved) return reserved.error();
    trace_op op;
    op.addr = static_cast<std::uint64_t>(*addr);
    op.size = static_cast<std::uint64_t>(std::fabs(*bytes));
    op.time_ns = std::llround(*ts * 1000);
    op.kind = *bytes >= 0 ? op_kind::alloc : op_kind::free;
    // What was live before this event, and what the allocator held after it.
    const double before = *allocated - *bytes;
    memory_.push_back({op, where, before > 0 ? static_cast<std::uint64_t>(before) : 0,
                       static_cast<std::uint64_t>(*reserved)});
    return {};
  }

  status gpu_work(const json& ev, const std::string& where) {
    auto ts = number(ev, "ts", where, 0, max_time_us);
    if (!ts) return ts.error();
    auto dur = number(ev, "dur", where, 0, max_time_us);
    if (!dur) return dur.error();
    std::int64_t correlation = -1;
    if (auto args = ev.find("args"); args != ev.end() && args->is_object()) {
      if (auto c = args->find("correlation"); c != args->end() && c->is_number_integer()) {
        correlation = c->get<std::int64_t>();
      }
    }
    const std::int64_t start = std::llround(*ts * 1000);
    work_.push_back({correlation, {start, start, std::llround(*dur * 1000)}});
    return {};
  }

  status runtime(const json& ev, const std::string& name, const std::string& where) {
    const bool wait = is_wait(name);
    if (!wait && !is_launch(name)) return {};
    auto ts = number(ev, "ts", where, 0, max_time_us);
    if (!ts) return ts.error();
    const std::int64_t start = std::llround(*ts * 1000);
    if (wait) {
      auto dur = number(ev, "dur", where, 0, max_time_us);
      if (!dur) return dur.error();
      t_.waits.push_back({start, start + std::llround(*dur * 1000)});
    }
    if (auto args = ev.find("args"); args != ev.end() && args->is_object()) {
      if (auto c = args->find("correlation"); c != args->end() && c->is_number_integer()) {
        launches_[c->get<std::int64_t>()] = start;
      }
    }
    return {};
  }

  result<alloc_trace> finish() {
    // The GPU's work, launched by the call of the same correlation (its
    // start when the launch is not in the file), by launch time.
    for (auto& [correlation, k] : work_) {
      if (auto l = launches_.find(correlation); l != launches_.end()) {
        k.launch_ns = std::min(l->second, k.start_ns);
      }
      t_.kernels.push_back(k);
    }
    std::stable_sort(
        t_.kernels.begin(), t_.kernels.end(),
        [](const gpu_kernel& a, const gpu_kernel& b) { return a.launch_ns < b.launch_ns; });
    std::stable_sort(t_.waits.begin(), t_.waits.end(), [](const host_wait& a, const host_wait& b) {
      return a.start_ns < b.start_ns;
    });
    std::stable_sort(memory_.begin(), memory_.end(), [](const pending& a, const pending& b) {
      return a.op.time_ns < b.op.time_ns;
    });
    block_ledger blocks;
    std::uint64_t seeded = 0;
    for (std::size_t i = 0; i < memory_.size(); ++i) {
      t_.baseline_reserved.push_back(memory_[i].reserved);
      t_.baseline_peak = std::max(t_.baseline_peak, memory_[i].reserved);
      trace_op op = memory_[i].op;
      if (op.kind == op_kind::alloc) {
        if (auto old = blocks.allocate(op)) {
          old->kind = op_kind::free;  // a free the profiler did not record
          old->time_ns = op.time_ns;
          t_.ops.push_back(*old);
        }
        t_.ops.push_back(op);
        continue;
      }
      const block_ledger::freed f = blocks.free(op.addr, i);
      if (f.what == block_ledger::freed::kind::double_free) {
        return bad(source_, memory_[i].where, "frees a block already freed (a double free)");
      }
      if (f.what == block_ledger::freed::kind::seed) {
        t_.seeds.push_back(op);
        seeded += op.size;
      }
      t_.ops.push_back(op);
    }
    // Bytes live from before the trace to its end (parameters, optimizer
    // state) appear in no event, only in Total Allocated: one seed holds them.
    if (!memory_.empty() && memory_.front().live_before > seeded) {
      trace_op rest;
      rest.addr = std::uint64_t{1} << 63;  // no CUDA address: never freed by an event
      rest.size = memory_.front().live_before - seeded;
      t_.seeds.push_back(rest);
    }
    if (t_.baseline_reserved.size() != t_.ops.size()) {
      // Frees the profiler did not record were added: no baseline per op then.
      t_.baseline_reserved.clear();
    }
    t_.timed = !t_.ops.empty();
    if (t_.ops.empty() && t_.kernels.empty()) {
      return bad(source_, "",
                 "no [memory] events for CUDA device " + std::to_string(device_) +
                     " (was the profiler run with profile_memory=True?)");
    }
    return std::move(t_);
  }

  struct pending {
    trace_op op;
    std::string where;
    std::uint64_t live_before;  // the allocator's allocated bytes before the event
    std::uint64_t reserved;     // and its reserved bytes after it
  };

  const std::string& source_;
  int device_;
  alloc_trace t_;
  std::vector<pending> memory_;
  std::vector<std::pair<std::int64_t, gpu_kernel>> work_;    // correlation, kernel
  std::unordered_map<std::int64_t, std::int64_t> launches_;  // correlation -> launch ns
};

}  // namespace

result<std::string> decompress_xz(std::string_view bytes, const std::string& source) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, 0) != LZMA_OK) {
    return status{errc::device_error, source + ": cannot start the xz decoder"};
  }
  std::string out;
  std::string chunk(1 << 20, '\0');
  strm.next_in = reinterpret_cast<const std::uint8_t*>(bytes.data());
  strm.avail_in = bytes.size();
  lzma_ret r = LZMA_OK;
  while (r == LZMA_OK) {
    strm.next_out = reinterpret_cast<std::uint8_t*>(chunk.data());
    strm.avail_out = chunk.size();
    r = lzma_code(&strm, LZMA_FINISH);
    out.append(chunk.data(), chunk.size() - strm.avail_out);
    if (out.size() > max_trace_file_bytes) {
      lzma_end(&strm);
      return status{errc::invalid_argument, source + ": larger than 1 GiB once decompressed"};
    }
  }
  lzma_end(&strm);
  if (r != LZMA_STREAM_END) {
    return status{
        errc::invalid_argument,
        source + ": not a valid xz file (" + (r == LZMA_BUF_ERROR ? "truncated" : "corrupt") + ")"};
  }
  return out;
}

result<alloc_trace> read_profiler_trace(std::string_view text, const std::string& source,
                                        int device_index) {
  if (text.size() > max_profiler_trace_bytes) {
    return bad(source, "", "larger than 128 MiB of JSON, the most a profiler trace may be");
  }
  // The parser recurses per level of nesting: refuse deep nesting first.
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 64) return bad(source, "", "JSON nested deeper than 64 levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  json root = json::parse(text, nullptr, false);
  if (root.is_discarded()) return bad(source, "", "not valid JSON");
  return profiler_reader(source, device_index).read(root);
}

}  // namespace strata::replay
