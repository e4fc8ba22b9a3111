// read_trace() and the text formats: RMM logging CSV, buffer-lifetime CSV
// and Strata's event trace JSON.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <system_error>

#include "alloc_trace.hpp"
#include "block_ledger.hpp"

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '"')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '"' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Decimal, or hex with a 0x prefix.
bool parse_u64(std::string_view s, std::uint64_t& v) {
  s = trim(s);
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A pointer or stream as RMM's logs print them: always hex, with a 0x
// prefix (fmt::ptr, %p), without one (%llx), or "(nil)" (%p of null).
bool parse_pointer(std::string_view s, std::uint64_t& v) {
  s = trim(s);
  if (s == "(nil)") {
    v = 0;
    return true;
  }
  if (s.starts_with("0x") || s.starts_with("0X")) s.remove_prefix(2);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, 16);
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
  block_ledger blocks;
  auto s = for_each_line(text, [&](std::size_t n, std::string_view line) -> status {
    if (n == 1) {
      if (!line.starts_with("Thread,Time,Action,Pointer,Size,Stream")) {
        return bad_line(source, n, "expected the header Thread,Time,Action,Pointer,Size,Stream");
      }
      return {};
    }
    const auto f = split(line, ',');
    if (f.size() != 6)
      return bad_line(source, n, "expected 6 fields, found " + std::to_string(f.size()));
    const std::string_view action = trim(f[2]);
    if (action != "allocate" && action != "free" && action != "allocate failure") {
      return bad_line(source, n,
                      "unknown Action '" + std::string(action).substr(0, 64) +
                          "' (expected allocate, free or allocate failure)");
    }
    trace_op op;
    if (!parse_pointer(f[3], op.addr)) {
      return bad_line(source, n, "bad Pointer '" + std::string(f[3]).substr(0, 64) + "'");
    }
    if (!parse_u64(f[4], op.size) || op.size > max_trace_bytes) {
      return bad_line(
          source, n,
          "bad Size '" + std::string(f[4]).substr(0, 64) + "' (expected 0 to 2^50 bytes)");
    }
    if (!parse_pointer(f[5], op.stream)) {
      return bad_line(source, n, "bad Stream '" + std::string(f[5]).substr(0, 64) + "'");
    }
    if (action == "allocate failure") {
      if (op.addr != 0) return bad_line(source, n, "an allocate failure with a non-null Pointer");
      t.failures.push_back(
          {t.ops.size(), op.size, 0, false, op.stream, "line " + std::to_string(n)});
    } else if (op.addr == 0) {
      return {};  // a zero-byte allocation's null pointer, and its free
    } else if (action == "allocate") {
      if (blocks.allocate(op)) {
        return bad_line(source, n, "allocate returns a pointer that is already live");
      }
      t.ops.push_back(op);
    } else {
      const block_ledger::freed f = blocks.free(op.addr, n);
      if (f.what == block_ledger::freed::kind::double_free) {
        return bad_line(source, n,
                        "frees a pointer that line " + std::to_string(f.earlier) +
                            " already freed (a double free)");
      }
      if (f.what == block_ledger::freed::kind::seed) t.seeds.push_back(op);  // before the log
      op.kind = op_kind::free;
      t.ops.push_back(op);
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
  struct row {
    std::uint64_t id, lower, upper, size;
    std::size_t line;
  };
  std::vector<row> rows;
  auto s = for_each_line(text, [&](std::size_t n, std::string_view line) -> status {
    if (n == 1) {
      if (line != "id,lower,upper,size")
        return bad_line(source, n, "expected the header id,lower,upper,size");
      return {};
    }
    const auto f = split(line, ',');
    row r{0, 0, 0, 0, n};
    if (f.size() != 4 || !parse_u64(f[0], r.id) || !parse_u64(f[1], r.lower) ||
        !parse_u64(f[2], r.upper) || !parse_u64(f[3], r.size)) {
      return bad_line(source, n, "expected four unsigned integers id,lower,upper,size");
    }
    if (r.upper <= r.lower) return bad_line(source, n, "upper must be greater than lower");
    if (r.size > max_trace_bytes) return bad_line(source, n, "size is larger than 2^50 bytes");
    rows.push_back(r);
    return {};
  });
  if (!s) return s;
  // An id names one buffer: two rows of one id may not be live at once.
  std::vector<const row*> by_id;
  by_id.reserve(rows.size());
  for (const row& r : rows) by_id.push_back(&r);
  std::sort(by_id.begin(), by_id.end(), [](const row* a, const row* b) {
    return a->id != b->id ? a->id < b->id : a->lower < b->lower;
  });
  for (std::size_t i = 1; i < by_id.size(); ++i) {
    const row& a = *by_id[i - 1];
    const row& b = *by_id[i];
    if (a.id == b.id && b.lower < a.upper) {
      return bad_line(source, std::max(a.line, b.line),
                      "id " + std::to_string(b.id) + " is live on lines " +
                          std::to_string(std::min(a.line, b.line)) + " and " +
                          std::to_string(std::max(a.line, b.line)) + " at once");
    }
  }
  struct end {
    std::uint64_t time;
    bool is_alloc;
    std::size_t row;
  };
  std::vector<end> ends;
  ends.reserve(2 * rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ends.push_back({rows[i].lower, true, i});
    ends.push_back({rows[i].upper, false, i});
  }
  // By time; at equal times frees first (a buffer's [lower, upper) ends
  // before one starting at upper).
  std::stable_sort(ends.begin(), ends.end(), [](const end& a, const end& b) {
    return a.time != b.time ? a.time < b.time : (!a.is_alloc && b.is_alloc);
  });
  for (const end& e : ends) {
    trace_op op;
    op.kind = e.is_alloc ? op_kind::alloc : op_kind::free;
    op.addr = e.row + 1;  // each row its own key
    op.size = rows[e.row].size;
    t.ops.push_back(op);
  }
  return t;
}

result<alloc_trace> read_strata_trace_json(std::string_view text, const std::string& source) {
  alloc_trace t;
  t.source = source;
  t.format = "strata_trace";
  block_ledger blocks;
  const std::string_view key = R"({"time_ns":)";
  std::size_t index = 0;
  std::int64_t last_ns = 0;  // times never go back (see alloc_trace::timed)
  const auto bad = [&](const std::string& what) {
    return status{errc::invalid_argument,
                  source + ": event " + std::to_string(index) + ": " + what};
  };
  for (std::size_t at = text.find(key); at != std::string_view::npos;
       at = text.find(key, at + 1), ++index) {
    const std::size_t close = text.find('}', at);
    if (close == std::string_view::npos) return bad("truncated");
    const std::string event(text.substr(at, std::min<std::size_t>(close - at + 1, 512)));
    char action[32] = {};
    unsigned long long time = 0;
    unsigned long long addr = 0;
    unsigned long long size = 0;
    unsigned long long stream = 0;
    int used = 0;
    if (std::sscanf(
            event.c_str(),  // NOLINT(cert-err34-c): the result count is checked
            R"({"time_ns":%llu,"action":"%31[a-z_]","address":"0x%llx","size":%llu,"stream":"0x%llx"}%n)",
            &time, action, &addr, &size, &stream, &used) != 5 ||
        used != static_cast<int>(event.size())) {
      return bad("not a Strata trace event: " + event);
    }
    if (size > max_trace_bytes) return bad("size " + std::to_string(size) + " is over 2^50 bytes");
    trace_op op;
    op.addr = addr;
    op.size = size;
    op.stream = stream;
    last_ns =
        std::max(last_ns, static_cast<std::int64_t>(std::min<unsigned long long>(time, INT64_MAX)));
    op.time_ns = last_ns;
    const std::string_view a = action;
    const std::string where = "event " + std::to_string(index);
    if (a == "alloc") {
      (void)blocks.allocate(op);  // a live address allocated again: the replayer frees the old
      t.ops.push_back(op);
    } else if (a == "free_requested") {
      const block_ledger::freed f = blocks.free(addr, index);
      if (f.what == block_ledger::freed::kind::double_free) {
        return bad("frees a block that event " + std::to_string(f.earlier) +
                   " already freed (a double free)");
      }
      if (f.what == block_ledger::freed::kind::seed) t.seeds.push_back(op);
      op.kind = op_kind::free;
      t.ops.push_back(op);
    } else if (a == "oom") {
      t.failures.push_back({t.ops.size(), size, 0, false, stream, where});
    } else if (a != "free_completed" && a != "segment_map" && a != "segment_unmap" &&
               a != "segment_alloc" && a != "segment_free" && a != "stitch") {
      count_unknown_action(t, a, where);
    }
  }
  if (index == 0 && text.find(R"("events":[)") == std::string_view::npos) {
    return status{errc::invalid_argument, source + ": not a Strata trace (no \"events\")"};
  }
  t.timed = !t.ops.empty();
  return t;
}

namespace {

// The whole file, refusing what is not a trace before reading it.
result<std::string> read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return status{errc::invalid_argument,
                  path + ": cannot open the file (" +
                      std::error_code(errno, std::generic_category()).message() + ")"};
  }
  if (S_ISDIR(st.st_mode)) return status{errc::invalid_argument, path + ": is a directory"};
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    return status{errc::invalid_argument, path + ": not a regular file or a pipe"};
  }
  const std::string too_big = path + ": larger than " + std::to_string(max_trace_file_bytes >> 30) +
                              " GiB, the most strata replay reads";
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > max_trace_file_bytes) {
    return status{errc::invalid_argument, too_big};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return status{errc::invalid_argument, path + ": cannot open the file"};
  std::string bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    if (bytes.size() + static_cast<std::size_t>(in.gcount()) > max_trace_file_bytes) {
      return status{errc::invalid_argument, too_big};
    }
    bytes.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) return status{errc::invalid_argument, path + ": read error"};
  return bytes;
}

}  // namespace

result<alloc_trace> read_trace(const std::string& path, int device_index) {
  auto file = read_file(path);
  if (!file) return file.error();
  std::string_view bytes = *file;
  if (bytes.empty()) return status{errc::invalid_argument, path + ": the file is empty"};
  std::string decompressed;
  if (bytes.starts_with("\xFD"
                        "7zXZ")) {
    auto text = decompress_xz(bytes, path);
    if (!text) return text.error();
    decompressed = std::move(*text);
    bytes = decompressed;
    if (bytes.empty()) return status{errc::invalid_argument, path + ": the file is empty"};
  }
  if (static_cast<unsigned char>(bytes[0]) == 0x80) {
    return read_pytorch_snapshot(bytes, path, device_index);
  }
  if (bytes.starts_with("\xEF\xBB\xBF")) bytes.remove_prefix(3);  // a UTF-8 byte order mark
  if (const std::size_t text = bytes.find_first_not_of(" \t\r\n");
      text != std::string_view::npos && bytes[text] == '{') {
    bytes.remove_prefix(text);  // JSON may start with blank lines (profiler traces do)
  }
  if (bytes.starts_with('{')) {
    if (bytes.find("\"traceEvents\"") != std::string_view::npos) {
      return read_profiler_trace(bytes, path, device_index);
    }
    return read_strata_trace_json(bytes, path);
  }
  if (bytes.starts_with("Thread,")) return read_rmm_csv(bytes, path);
  if (bytes.starts_with("id,")) return read_lifetime_csv(bytes, path);
  return status{errc::invalid_argument,
                path +
                    ": unknown trace format (expected a PyTorch snapshot pickle, a Strata "
                    "trace JSON, a torch.profiler trace JSON, an RMM log CSV or an "
                    "id,lower,upper,size CSV, any of them may be xz-compressed)"};
}

bool starts_warm(const alloc_trace& t) noexcept {
  return !t.baseline_reserved.empty() && t.baseline_peak > 0 &&
         t.baseline_reserved.front() >= t.baseline_peak / 2;
}

}  // namespace strata::replay
