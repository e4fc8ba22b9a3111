// PyTorch memory snapshots: device_traces[device] drives the replay
// (alloc, free_requested); segment_alloc/free and segment_map/unmap give the
// recording allocator's reserved bytes; `oom` entries are the recording
// allocator's failures; the end state (segments) seeds warm traces and
// anchors the baseline.
//
// The actions and keys read are those PyTorch's serializer writes
// (torch/csrc/cuda/memory_snapshot.cpp): alloc, free_requested,
// free_completed, segment_alloc, segment_free, segment_map, segment_unmap
// with addr, size, stream; oom with device_free, size, stream; snapshot and
// user_defined (markers, no memory effect). time_us, where every replayed
// event has one, times the ops (alloc_trace::timed); frames name the
// allocations. Other keys (compile_context, user_metadata, ...) are
// ignored; other actions counted.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "alloc_trace.hpp"
#include "block_ledger.hpp"
#include "pickle_reader.hpp"

namespace strata::replay {

namespace {

constexpr std::size_t max_frames = 6;
constexpr auto max_address = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

const char* type_name(const pickle_value& v) {
  if (v.is_none()) return "None";
  if (v.is_int()) return "an integer";
  if (v.is_float()) return "a float";
  if (v.is_string()) return "a string";
  if (v.is_dict()) return "a dict";
  if (v.is_tuple()) return "a tuple";
  if (v.is_list()) return "a list";
  return "a bool";
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The user's frames of a PyTorch stack: Python files first, else the top.
std::vector<std::string> pick_frames(const pickle_value& list) {
  std::vector<std::string> py;
  std::vector<std::string> any;
  for (const pickle_value& f : list.items()) {
    const pickle_value* name = f.get("name");
    const pickle_value* file = f.get("filename");
    const pickle_value* line = f.get("line");
    if (name == nullptr || file == nullptr || !name->is_string() || !file->is_string()) continue;
    std::string text = std::string(name->as_string()) + " (" + std::string(file->as_string()) +
                       ":" + std::to_string(line != nullptr ? line->as_int() : 0) + ")";
    if (file->as_string().ends_with(".py") && py.size() < max_frames) py.push_back(text);
    if (any.size() < 3) any.push_back(std::move(text));
  }
  return py.empty() ? any : py;
}

class snapshot_reader {
 public:
  snapshot_reader(const std::string& source, int device) : source_(source), device_(device) {}

  result<alloc_trace> read(const pickle_value& root) {
    const pickle_value* traces = root.get("device_traces");
    const pickle_value* segments = root.get("segments");
    if (traces == nullptr || segments == nullptr) {
      return bad("", "not a PyTorch memory snapshot (no 'device_traces' or 'segments')");
    }
    if (!traces->is_list() || traces->is_tuple()) {
      return bad("", std::string("'device_traces' is ") + type_name(*traces) + ", expected a list");
    }
    if (!segments->is_list() || segments->is_tuple()) {
      return bad("", std::string("'segments' is ") + type_name(*segments) + ", expected a list");
    }
    if (device_ < 0 || static_cast<std::size_t>(device_) >= traces->items().size()) {
      return bad("", "no device trace " + std::to_string(device_) + " (the file has " +
                         std::to_string(traces->items().size()) + ")");
    }
    const pickle_value* settings = root.get("allocator_settings");
    t_.source = source_;
    t_.format = settings != nullptr && settings->get("allocator") != nullptr ? "strata_snapshot"
                                                                             : "pytorch_snapshot";
    const pickle_value& events = traces->items()[static_cast<std::size_t>(device_)];
    if (!events.is_list() || events.is_tuple()) {
      return bad("", "device trace " + std::to_string(device_) + " is " + type_name(events) +
                         ", expected a list");
    }
    for (std::size_t i = 0; i < events.items().size(); ++i) {
      if (auto s = event(events.items()[i], i); !s) return s;
    }
    t_.timed = timed_ && !t_.ops.empty();
    for (std::size_t i = 0; i < segments->items().size(); ++i) {
      if (auto s = segment(segments->items()[i], i); !s) return s;
    }
    if (auto s = baseline(); !s) return s;
    return std::move(t_);
  }

 private:
  status bad(const std::string& where, const std::string& what) const {
    return {errc::invalid_argument, source_ + ": " + (where.empty() ? "" : where + ": ") + what};
  }

  // d[key] as an integer in [0, max]; `fallback` when absent and optional.
  result<std::uint64_t> integer(const pickle_value& d, std::string_view key,
                                const std::string& where, std::uint64_t max, bool required,
                                std::uint64_t fallback = 0) const {
    const pickle_value* v = d.get(key);
    if (v == nullptr) {
      if (!required) return fallback;
      return bad(where, "no '" + std::string(key) + "'");
    }
    if (!v->is_int()) {
      return bad(where, "'" + std::string(key) + "' is " + type_name(*v) + ", expected an integer");
    }
    const std::int64_t n = v->as_int();
    if (n < 0 || static_cast<std::uint64_t>(n) > max) {
      return bad(where, "'" + std::string(key) + "' is " + std::to_string(n) + ", expected 0 to " +
                            std::to_string(max));
    }
    return static_cast<std::uint64_t>(n);
  }
  // A stream handle: any integer (PyTorch writes the pointer as int64).
  result<std::uint64_t> stream(const pickle_value& d, const std::string& where) const {
    const pickle_value* v = d.get("stream");
    if (v == nullptr || v->is_none()) return std::uint64_t{0};
    if (!v->is_int()) return bad(where, std::string("'stream' is ") + type_name(*v));
    return static_cast<std::uint64_t>(v->as_int());
  }
  status add_reserved(std::int64_t delta, const std::string& where) {
    if (__builtin_add_overflow(reserved_, delta, &reserved_)) {
      return bad(where, "segment sizes add up past 2^63 bytes");
    }
    high_ = std::max(high_, reserved_);
    low_ = std::min(low_, reserved_);
    return {};
  }
  void push_op(const trace_op& op) {
    t_.ops.push_back(op);
    relative_.push_back(reserved_);
  }

  status event(const pickle_value& e, std::size_t i) {
    std::string where = "event " + std::to_string(i);
    if (!e.is_dict()) return bad(where, std::string("is ") + type_name(e) + ", expected a dict");
    const pickle_value* action = e.get("action");
    if (action == nullptr) return bad(where, "no 'action'");
    if (!action->is_string()) {
      return bad(where, std::string("'action' is ") + type_name(*action) + ", expected a string");
    }
    const std::string_view a = action->as_string();
    const std::string at = where;
    where += " (" + std::string(a) + ")";
    if (a == "snapshot" || a == "user_defined") return {};
    if (a == "oom") return oom(e, where, at);
    const bool known = a == "alloc" || a == "free_requested" || a == "free_completed" ||
                       a == "segment_alloc" || a == "segment_free" || a == "segment_map" ||
                       a == "segment_unmap";
    if (!known) {
      count_unknown_action(t_, a, at);
      return {};
    }
    trace_op op;
    auto addr = integer(e, "addr", where, max_address, true);
    if (!addr) return addr.error();
    auto size = integer(e, "size", where, max_trace_bytes, true);
    if (!size) return size.error();
    auto s = stream(e, where);
    if (!s) return s.error();
    op.addr = *addr;
    op.size = *size;
    op.stream = *s;
    if (auto st = time_of(e, where, op); !st) return st;
    const auto signed_size = static_cast<std::int64_t>(op.size);
    if (a == "segment_alloc" || a == "segment_map") return add_reserved(signed_size, where);
    if (a == "segment_free" || a == "segment_unmap") return add_reserved(-signed_size, where);
    if (a == "alloc") return alloc(e, op);
    if (a == "free_requested") return free(op, i, where);
    return {};  // free_completed: the block was already replayed as freed
  }

  // The event's time_us, in ns, into op.time_ns; an event without one
  // leaves the trace untimed. A time before the last one's counts as the
  // last one's (the replay's clock never goes back).
  status time_of(const pickle_value& e, const std::string& where, trace_op& op) {
    const pickle_value* v = e.get("time_us");
    if (v == nullptr || !v->is_int()) {
      timed_ = false;
      return {};
    }
    constexpr std::int64_t max_us = std::numeric_limits<std::int64_t>::max() / 1000;
    const std::int64_t us = v->as_int();
    if (us < 0 || us > max_us) {
      return bad(where, "'time_us' is " + std::to_string(us) + ", expected 0 to " +
                            std::to_string(max_us));
    }
    last_ns_ = std::max(last_ns_, us * 1000);
    op.time_ns = last_ns_;
    return {};
  }

  status oom(const pickle_value& e, const std::string& where, const std::string& at) {
    auto size = integer(e, "size", where, max_trace_bytes, true);
    if (!size) return size.error();
    auto device_free = integer(e, "device_free", where, max_address, true);
    if (!device_free) return device_free.error();
    auto s = stream(e, where);
    if (!s) return s.error();
    t_.failures.push_back({t_.ops.size(), *size, *device_free, true, *s, at});
    return {};
  }

  status alloc(const pickle_value& e, trace_op op) {
    if (const pickle_value* fr = e.get("frames"); fr != nullptr && !fr->items().empty()) {
      auto [it, fresh] =
          frame_ids_.try_emplace(fr->container(), static_cast<std::uint32_t>(t_.frames.size()));
      if (fresh) t_.frames.push_back(pick_frames(*fr));
      op.frames = it->second;
    }
    if (auto old = blocks_.allocate(op)) {
      // The recording lost this block's free (a ring that wrapped): free it here.
      old->kind = op_kind::free;
      old->time_ns = op.time_ns;
      push_op(*old);
    }
    push_op(op);
    return {};
  }

  status free(trace_op op, std::size_t i, const std::string& where) {
    const block_ledger::freed f = blocks_.free(op.addr, i);
    if (f.what == block_ledger::freed::kind::double_free) {
      return bad(where, "frees " + hex(op.addr) + ", which event " + std::to_string(f.earlier) +
                            " already freed (a double free)");
    }
    if (f.what == block_ledger::freed::kind::live) {
      op.size = f.alloc.size;
      op.stream = f.alloc.stream;
    } else {
      t_.seeds.push_back(op);  // allocated before the trace began
    }
    op.kind = op_kind::free;
    push_op(op);
    return {};
  }

  // The end state: blocks live at the end whose allocation the trace lacks
  // were live all along; reserved bytes at the end anchor the baseline.
  status segment(const pickle_value& seg, std::size_t i) {
    const std::string where = "segment " + std::to_string(i);
    if (!seg.is_dict())
      return bad(where, std::string("is ") + type_name(seg) + ", expected a dict");
    if (const pickle_value* dev = seg.get("device"); dev != nullptr) {
      if (!dev->is_int()) return bad(where, std::string("'device' is ") + type_name(*dev));
      if (dev->as_int() != device_) return {};
    }
    auto address = integer(seg, "address", where, max_address, true);
    if (!address) return address.error();
    auto total = integer(seg, "total_size", where, max_trace_bytes, true);
    if (!total) return total.error();
    if (__builtin_add_overflow(end_reserved_, static_cast<std::int64_t>(*total), &end_reserved_)) {
      return bad(where, "segment sizes add up past 2^63 bytes");
    }
    auto s = stream(seg, where);
    if (!s) return s.error();
    const pickle_value* blocks = seg.get("blocks");
    if (blocks == nullptr) return {};
    if (!blocks->is_list()) return bad(where, std::string("'blocks' is ") + type_name(*blocks));
    // PyTorch 2.0-2.1 may leave a block's address out: like the viewer, it
    // is the segment's address plus the sizes of the blocks before it.
    std::uint64_t walk = *address;
    for (std::size_t k = 0; k < blocks->items().size(); ++k) {
      const pickle_value& b = blocks->items()[k];
      const std::string bw = where + " block " + std::to_string(k);
      if (!b.is_dict()) return bad(bw, std::string("is ") + type_name(b) + ", expected a dict");
      auto size = integer(b, "size", bw, max_trace_bytes, true);
      if (!size) return size.error();
      auto addr = integer(b, "address", bw, max_address, false, walk);
      if (!addr) return addr.error();
      walk = *addr + *size;
      const pickle_value* state = b.get("state");
      if (state == nullptr || !state->is_string()) return bad(bw, "no 'state' string");
      const std::string_view st = state->as_string();
      if (st != "active_allocated" && st != "active_pending_free" && st != "inactive") {
        return bad(bw, "state '" + std::string(st) +
                           "' (expected active_allocated, active_pending_free or inactive)");
      }
      if (st != "active_allocated" || blocks_.live(*addr)) continue;
      if (auto was = blocks_.freed_at(*addr)) {
        return bad(bw, "is allocated at " + hex(*addr) + ", but event " + std::to_string(*was) +
                           " freed it and nothing allocated it again");
      }
      // Legacy blocks may lack requested_size: the viewer then takes the
      // first history entry's real_size.
      std::uint64_t legacy = 0;
      if (const pickle_value* h = b.get("history"); h != nullptr && !h->items().empty()) {
        auto real = integer(h->items()[0], "real_size", bw + " history 0", max_trace_bytes, false);
        if (!real) return real.error();
        legacy = *real;
      }
      auto requested = integer(b, "requested_size", bw, max_trace_bytes, false, legacy);
      if (!requested) return requested.error();
      trace_op seed;
      seed.addr = *addr;
      seed.size = *requested > 0 ? *requested : *size;
      seed.stream = *s;
      t_.seeds.push_back(seed);
    }
    return {};
  }

  status baseline() {
    if (high_ <= low_ && end_reserved_ == 0) return {};
    std::int64_t start = 0;
    if (__builtin_sub_overflow(end_reserved_, reserved_, &start)) {
      return bad("", "segment sizes add up past 2^63 bytes");
    }
    start = std::max(start, -low_);
    std::int64_t peak = 0;
    if (__builtin_add_overflow(start, high_, &peak)) {
      return bad("", "segment sizes add up past 2^63 bytes");
    }
    t_.baseline_reserved.reserve(relative_.size());
    for (const std::int64_t r : relative_) {
      t_.baseline_reserved.push_back(static_cast<std::uint64_t>(start + r));  // r <= high_
    }
    t_.baseline_peak = static_cast<std::uint64_t>(peak);
    return {};
  }

  const std::string& source_;
  int device_;
  alloc_trace t_;
  std::unordered_map<const void*, std::uint32_t> frame_ids_;
  block_ledger blocks_;
  std::int64_t reserved_ = 0;  // relative to the start; made absolute by baseline()
  std::int64_t low_ = 0;
  std::int64_t high_ = 0;
  std::int64_t end_reserved_ = 0;
  std::vector<std::int64_t> relative_;
  bool timed_ = true;  // every event so far had a time
  std::int64_t last_ns_ = 0;
};

}  // namespace

void count_unknown_action(alloc_trace& t, std::string_view name, const std::string& where) {
  // Names are cut to 64 bytes and at most 32 are told apart (a damaged file
  // could hold millions), the rest counted together.
  constexpr std::size_t max_names = 32;
  std::string key(name.substr(0, 64));
  if (t.unknown_actions.size() == max_names && t.unknown_actions.back().name != key) {
    key = "(other names)";
  }
  for (unknown_action& u : t.unknown_actions) {
    if (u.name == key) {
      ++u.count;
      return;
    }
  }
  if (t.unknown_actions.size() == max_names) {
    t.unknown_actions.push_back({"(other names)", 1, where});
    return;
  }
  t.unknown_actions.push_back({std::move(key), 1, where});
}

result<alloc_trace> read_pytorch_snapshot(std::string_view bytes, const std::string& source,
                                          int device_index) {
  auto root = read_pickle(bytes);
  if (!root) return status{errc::invalid_argument, source + ": " + root.error().message()};
  return snapshot_reader(source, device_index).read(*root);
}

}  // namespace strata::replay
