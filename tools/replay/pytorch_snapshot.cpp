// PyTorch memory snapshots: device_traces[device] drives the replay
// (alloc, free_requested); segment_alloc/free and segment_map/unmap give the
// recording allocator's reserved bytes; the end state (segments) seeds warm
// traces and anchors the baseline.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "alloc_trace.hpp"
#include "pickle_reader.hpp"

namespace strata::replay {

namespace {

constexpr std::size_t max_frames = 6;

// The user's frames of a PyTorch stack: Python files first, else the top.
std::vector<std::string> pick_frames(const pickle_value& list) {
  std::vector<std::string> py;
  std::vector<std::string> any;
  for (const pickle_value& f : list.items()) {
    const pickle_value* name = f.get("name");
    const pickle_value* file = f.get("filename");
    const pickle_value* line = f.get("line");
    if (name == nullptr || file == nullptr) continue;
    std::string text = std::string(name->as_string()) + " (" + std::string(file->as_string()) +
                       ":" + std::to_string(line != nullptr ? line->as_int() : 0) + ")";
    if (file->as_string().ends_with(".py") && py.size() < max_frames) py.push_back(text);
    if (any.size() < 3) any.push_back(std::move(text));
  }
  return py.empty() ? any : py;
}

}  // namespace

result<alloc_trace> read_pytorch_snapshot(std::string_view bytes, const std::string& source,
                                          int device_index) {
  auto root = read_pickle(bytes);
  if (!root) return status{errc::invalid_argument, source + ": " + root.error().message()};
  const auto bad = [&](const std::string& what) {
    return status{errc::invalid_argument, source + ": " + what};
  };
  const pickle_value* traces = root->get("device_traces");
  const pickle_value* segments = root->get("segments");
  if (traces == nullptr || segments == nullptr) {
    return bad("not a PyTorch memory snapshot (no 'device_traces' or 'segments')");
  }
  if (device_index < 0 || static_cast<std::size_t>(device_index) >= traces->items().size()) {
    return bad("no device trace " + std::to_string(device_index) + " (the file has " +
               std::to_string(traces->items().size()) + ")");
  }
  alloc_trace t;
  t.source = source;
  t.format = root->get("allocator_settings") != nullptr &&
                     root->get("allocator_settings")->get("allocator") != nullptr
                 ? "strata_snapshot"
                 : "pytorch_snapshot";
  std::unordered_map<const void*, std::uint32_t> frame_ids;
  std::unordered_map<std::uint64_t, trace_op> live;  // addr -> its alloc
  std::int64_t reserved = 0;                         // relative to the start; made absolute below
  std::int64_t low = 0;
  std::int64_t high = 0;
  std::vector<std::int64_t> relative;
  const auto& events = traces->items()[static_cast<std::size_t>(device_index)].items();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const pickle_value& e = events[i];
    const pickle_value* action = e.get("action");
    if (action == nullptr) return bad("event " + std::to_string(i) + ": no 'action'");
    const std::string_view a = action->as_string();
    const pickle_value* addr = e.get("addr");
    const pickle_value* size = e.get("size");
    const pickle_value* stream = e.get("stream");
    if (addr == nullptr || size == nullptr) {
      return bad("event " + std::to_string(i) + " (" + std::string(a) + "): no 'addr' or 'size'");
    }
    trace_op op;
    op.addr = static_cast<std::uint64_t>(addr->as_int());
    op.size = static_cast<std::uint64_t>(size->as_int());
    op.stream = stream != nullptr ? static_cast<std::uint64_t>(stream->as_int()) : 0;
    if (a == "segment_alloc" || a == "segment_map") {
      reserved += static_cast<std::int64_t>(op.size);
      high = std::max(high, reserved);
    } else if (a == "segment_free" || a == "segment_unmap") {
      reserved -= static_cast<std::int64_t>(op.size);
      low = std::min(low, reserved);
    } else if (a == "alloc") {
      if (auto old = live.find(op.addr); old != live.end()) {
        // The recording lost this block's free (a ring that wrapped): free it here.
        trace_op f = old->second;
        f.kind = op_kind::free;
        t.ops.push_back(f);
        relative.push_back(reserved);
        live.erase(old);
      }
      if (const pickle_value* fr = e.get("frames"); fr != nullptr && !fr->items().empty()) {
        const void* key = fr->items().data();
        auto [it, fresh] = frame_ids.try_emplace(key, static_cast<std::uint32_t>(t.frames.size()));
        if (fresh) t.frames.push_back(pick_frames(*fr));
        op.frames = it->second;
      }
      live.emplace(op.addr, op);
      t.ops.push_back(op);
      relative.push_back(reserved);
    } else if (a == "free_requested") {
      auto it = live.find(op.addr);
      if (it == live.end()) {
        t.seeds.push_back(op);  // allocated before the trace began
      } else {
        op.size = it->second.size;
        op.stream = it->second.stream;
        live.erase(it);
      }
      op.kind = op_kind::free;
      t.ops.push_back(op);
      relative.push_back(reserved);
    }
  }
  // The end state: blocks live at the end whose allocation the trace lacks
  // were live all along; reserved bytes at the end anchor the baseline.
  std::int64_t end_reserved = 0;
  for (const pickle_value& seg : segments->items()) {
    if (const pickle_value* dev = seg.get("device");
        dev != nullptr && dev->as_int() != device_index) {
      continue;
    }
    end_reserved += seg.get("total_size") != nullptr ? seg.get("total_size")->as_int() : 0;
    const pickle_value* stream = seg.get("stream");
    const pickle_value* blocks = seg.get("blocks");
    if (blocks == nullptr) continue;
    for (const pickle_value& b : blocks->items()) {
      const pickle_value* state = b.get("state");
      const pickle_value* addr = b.get("address");
      if (state == nullptr || addr == nullptr || state->as_string() != "active_allocated") continue;
      const auto a = static_cast<std::uint64_t>(addr->as_int());
      if (live.contains(a)) continue;
      const pickle_value* req = b.get("requested_size");
      const pickle_value* size = b.get("size");
      trace_op seed;
      seed.addr = a;
      seed.size = static_cast<std::uint64_t>(
          req != nullptr && req->as_int() > 0 ? req->as_int() : (size ? size->as_int() : 0));
      seed.stream = stream != nullptr ? static_cast<std::uint64_t>(stream->as_int()) : 0;
      t.seeds.push_back(seed);
    }
  }
  const std::int64_t start = std::max(end_reserved - reserved, -low);
  if (high > low || end_reserved > 0) {
    t.baseline_reserved.reserve(relative.size());
    for (std::int64_t r : relative)
      t.baseline_reserved.push_back(static_cast<std::uint64_t>(start + r));
    t.baseline_peak = static_cast<std::uint64_t>(start + high);
  }
  return t;
}

}  // namespace strata::replay
