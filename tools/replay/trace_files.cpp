// read_trace() and the text formats: RMM logging CSV, buffer-lifetime CSV
// and Strata's event trace JSON.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "alloc_trace.hpp"

namespace strata::replay {

namespace {

status bad_line(const std::string& source, std::size_t line, const std::string& what) {
  return {errc::invalid_argument, source + ":" + std::to_string(line) + ": " + what};
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    const std::size_t end = line.find(sep, start);
    out.push_back(line.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// Decimal, or hex with a 0x prefix.
bool parse_u64(std::string_view s, std::uint64_t& v) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '"')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '"' || s.back() == '\r')) s.remove_suffix(1);
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

template <class Fn>
status for_each_line(std::string_view text, Fn fn) {
  std::size_t n = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (line.ends_with('\r')) line.remove_suffix(1);
    ++n;
    if (!line.empty()) {
      if (auto s = fn(n, line); !s) return s;
    }
    start = end + 1;
  }
  return {};
}

}  // namespace

result<alloc_trace> read_rmm_csv(std::string_view text, const std::string& source) {
  alloc_trace t;
  t.source = source;
  t.format = "rmm_csv";
  std::unordered_map<std::uint64_t, trace_op> live;
  auto s = for_each_line(text, [&](std::size_t n, std::string_view line) -> status {
    if (n == 1) {
      if (!line.starts_with("Thread,Time,Action,Pointer,Size,Stream")) {
        return bad_line(source, n, "expected the header Thread,Time,Action,Pointer,Size,Stream");
      }
      return {};
    }
    const auto f = split(line, ',');
    if (f.size() < 6)
      return bad_line(source, n, "expected 6 fields, found " + std::to_string(f.size()));
    trace_op op;
    if (!parse_u64(f[3], op.addr) || !parse_u64(f[4], op.size) || !parse_u64(f[5], op.stream)) {
      return bad_line(source, n, "bad Pointer, Size or Stream");
    }
    if (f[2] == "allocate") {
      live[op.addr] = op;
      t.ops.push_back(op);
    } else if (f[2] == "free") {
      if (!live.erase(op.addr)) t.seeds.push_back(op);  // allocated before the log began
      op.kind = op_kind::free;
      t.ops.push_back(op);
    } else if (f[2] != "allocate failure") {
      return bad_line(source, n,
                      "unknown Action '" + std::string(f[2]) +
                          "' (expected allocate, free or allocate failure)");
    }
    return {};
  });
  if (!s) return s;
  return t;
}

result<alloc_trace> read_lifetime_csv(std::string_view text, const std::string& source) {
  alloc_trace t;
  t.source = source;
  t.format = "lifetime_csv";
  struct end {
    std::uint64_t time;
    bool is_alloc;
    std::uint64_t id;
    std::uint64_t size;
  };
  std::vector<end> ends;
  auto s = for_each_line(text, [&](std::size_t n, std::string_view line) -> status {
    if (n == 1) {
      if (line != "id,lower,upper,size")
        return bad_line(source, n, "expected the header id,lower,upper,size");
      return {};
    }
    const auto f = split(line, ',');
    std::uint64_t id = 0;
    std::uint64_t lower = 0;
    std::uint64_t upper = 0;
    std::uint64_t size = 0;
    if (f.size() != 4 || !parse_u64(f[0], id) || !parse_u64(f[1], lower) ||
        !parse_u64(f[2], upper) || !parse_u64(f[3], size)) {
      return bad_line(source, n, "expected four unsigned integers id,lower,upper,size");
    }
    if (upper <= lower) return bad_line(source, n, "upper must be greater than lower");
    ends.push_back({lower, true, id, size});
    ends.push_back({upper, false, id, size});
    return {};
  });
  if (!s) return s;
  // By time; at equal times frees first (a buffer's [lower, upper) ends
  // before one starting at upper).
  std::stable_sort(ends.begin(), ends.end(), [](const end& a, const end& b) {
    return a.time != b.time ? a.time < b.time : (!a.is_alloc && b.is_alloc);
  });
  for (const end& e : ends) {
    trace_op op;
    op.kind = e.is_alloc ? op_kind::alloc : op_kind::free;
    op.addr = e.id + 1;
    op.size = e.size;
    t.ops.push_back(op);
  }
  return t;
}

result<alloc_trace> read_strata_trace_json(std::string_view text, const std::string& source) {
  alloc_trace t;
  t.source = source;
  t.format = "strata_trace";
  std::unordered_map<std::uint64_t, trace_op> live;
  const std::string_view key = R"({"time_ns":)";
  std::size_t index = 0;
  for (std::size_t at = text.find(key); at != std::string_view::npos;
       at = text.find(key, at + 1), ++index) {
    const std::size_t close = text.find('}', at);
    if (close == std::string_view::npos) {
      return status{errc::invalid_argument,
                    source + ": event " + std::to_string(index) + ": truncated"};
    }
    const std::string event(text.substr(at, close - at + 1));
    char action[32] = {};
    unsigned long long time = 0;
    unsigned long long addr = 0;
    unsigned long long size = 0;
    unsigned long long stream = 0;
    if (std::sscanf(
            event.c_str(),  // NOLINT(cert-err34-c): the result count is checked
            R"({"time_ns":%llu,"action":"%31[a-z_]","address":"0x%llx","size":%llu,"stream":"0x%llx"})",
            &time, action, &addr, &size, &stream) != 5) {
      std::string msg = source;
      msg += ": event " + std::to_string(index) + ": not a Strata trace event: ";
      msg += event;
      return status{errc::invalid_argument, std::move(msg)};
    }
    trace_op op;
    op.addr = addr;
    op.size = size;
    op.stream = stream;
    const std::string_view a = action;
    if (a == "alloc") {
      live[addr] = op;
      t.ops.push_back(op);
    } else if (a == "free_requested") {
      if (!live.erase(addr)) t.seeds.push_back(op);
      op.kind = op_kind::free;
      t.ops.push_back(op);
    }
  }
  if (index == 0 && text.find(R"("events":[)") == std::string_view::npos) {
    return status{errc::invalid_argument, source + ": not a Strata trace (no \"events\")"};
  }
  return t;
}

result<alloc_trace> read_trace(const std::string& path, int device_index) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return status{errc::invalid_argument, path + ": cannot open the file"};
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = std::move(buf).str();
  if (bytes.empty()) return status{errc::invalid_argument, path + ": the file is empty"};
  if (static_cast<unsigned char>(bytes[0]) == 0x80) {
    return read_pytorch_snapshot(bytes, path, device_index);
  }
  if (bytes[0] == '{') return read_strata_trace_json(bytes, path);
  if (bytes.starts_with("Thread,")) return read_rmm_csv(bytes, path);
  if (bytes.starts_with("id,")) return read_lifetime_csv(bytes, path);
  return status{errc::invalid_argument,
                path +
                    ": unknown trace format (expected a PyTorch snapshot pickle, a Strata "
                    "trace JSON, an RMM log CSV or an id,lower,upper,size CSV)"};
}

}  // namespace strata::replay
