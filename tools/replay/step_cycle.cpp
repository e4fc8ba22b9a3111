#include "step_cycle.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

namespace strata::replay {

namespace {

constexpr std::int32_t none = -1;

// A size's share of the hash of a multiset of sizes (splitmix64's finalizer):
// the multiset's hash is the sum of its members' shares.
std::uint64_t share(std::uint64_t size) {
  std::uint64_t x = size + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The blocks a step hands over: frees of blocks allocated before it
// (carried in) and allocations still live at its end (carried out), paired
// by size in order. pair_of_op[j] is op j's pair, or none.
struct handover {
  std::vector<std::int32_t> pair_of_op;
  std::vector<std::uint64_t> carried_out_addr;  // by pair: the step's own block
  bool ok = false;
};

handover hand_over(const alloc_trace& t, std::size_t first, std::size_t count) {
  handover h;
  h.pair_of_op.assign(count, none);
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // addr -> size, before the step
  for (const trace_op& s : t.seeds) live[s.addr] = s.size;
  for (std::size_t i = 0; i < first; ++i) {
    const trace_op& op = t.ops[i];
    if (op.kind == op_kind::alloc) {
      live[op.addr] = op.size;
    } else {
      live.erase(op.addr);
    }
  }
  std::unordered_map<std::uint64_t, std::size_t> mine;  // addr -> allocating op (in the step)
  std::map<std::uint64_t, std::deque<std::size_t>> carried_in;  // size -> freeing ops
  for (std::size_t j = 0; j < count; ++j) {
    const trace_op& op = t.ops[first + j];
    if (op.kind == op_kind::alloc) {
      mine[op.addr] = j;
    } else if (auto it = mine.find(op.addr); it != mine.end()) {
      mine.erase(it);
    } else {
      auto before = live.find(op.addr);
      if (before == live.end()) return h;  // frees what nothing allocated
      carried_in[before->second].push_back(j);
    }
  }
  std::vector<std::size_t> out;
  out.reserve(mine.size());
  for (const auto& [addr, j] : mine) out.push_back(j);
  std::sort(out.begin(), out.end());
  for (const std::size_t j : out) {
    auto it = carried_in.find(t.ops[first + j].size);
    if (it == carried_in.end() || it->second.empty()) return h;
    const auto q = static_cast<std::int32_t>(h.carried_out_addr.size());
    h.pair_of_op[it->second.front()] = q;
    h.pair_of_op[j] = q;
    it->second.pop_front();
    h.carried_out_addr.push_back(t.ops[first + j].addr);
  }
  for (const auto& [size, frees] : carried_in) {
    if (!frees.empty()) return h;
  }
  h.ok = true;
  return h;
}

bool same_op(const trace_op& a, const trace_op& b) {
  return a.kind == b.kind && a.size == b.size && a.stream == b.stream;
}

}  // namespace

std::optional<step_cycle> find_last_step(const alloc_trace& t, std::size_t budget) {
  const std::size_t n = t.ops.size();
  if (!t.timed || n < 2 * min_step_ops) return std::nullopt;
  // After each op: the hash of the live sizes, and the live bytes.
  std::vector<std::uint64_t> hash(n);
  std::vector<std::uint64_t> bytes(n);
  std::uint64_t h = 0;
  std::uint64_t b = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  for (const trace_op& s : t.seeds) {
    live[s.addr] = s.size;
    h += share(s.size);
    b += s.size;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const trace_op& op = t.ops[i];
    if (op.kind == op_kind::alloc) {
      live[op.addr] = op.size;
      h += share(op.size);
      b += op.size;
    } else if (auto it = live.find(op.addr); it != live.end()) {
      h -= share(it->second);
      b -= it->second;
      live.erase(it);
    }
    hash[i] = h;
    bytes[i] = b;
  }
  // The most live bytes from op i on: a window's peak is its suffix's.
  std::vector<std::uint64_t>& suffix_peak = bytes;
  for (std::size_t i = n - 1; i-- > 0;)
    suffix_peak[i] = std::max(suffix_peak[i], suffix_peak[i + 1]);
  // Candidate lengths: back to an op after which the same sizes were live.
  // A check that gets past the hash and the peak compares ops until one
  // differs, and pairs the carried blocks in O(n) if none does: a budget
  // keeps a trace built to match at many lengths from taking long.
  for (std::size_t len = min_step_ops; 2 * len <= n; ++len) {
    const std::size_t first = n - len;
    if (hash[first - 1] != hash[n - 1] || suffix_peak[first] < suffix_peak[0]) continue;
    std::size_t i = first;
    for (; i < n && budget > 0 && same_op(t.ops[i], t.ops[i - len]); ++i) --budget;
    if (i < n) {
      if (budget == 0) return std::nullopt;
      continue;
    }
    if (budget < n) return std::nullopt;
    budget -= n;
    if (!hand_over(t, first, len).ok) continue;
    const std::int64_t span = t.ops[n - 1].time_ns - t.ops[first - 1].time_ns;
    if (span <= 0) continue;
    return step_cycle{first, len, span};
  }
  return std::nullopt;
}

std::size_t repeats_within_bound(const step_cycle& step, std::size_t repeats) {
  return std::min(repeats, max_repeated_ops / std::max<std::size_t>(step.ops, 1));
}

alloc_trace with_step_repeated(const alloc_trace& t, const step_cycle& step, std::size_t repeats) {
  // What a replay reads, without the stack frames (a repeat is not reported
  // block by block) or the recorded failures.
  alloc_trace out;
  out.source = t.source;
  out.format = t.format;
  out.timed = t.timed;
  out.seeds = t.seeds;
  out.ops = t.ops;
  out.kernels = t.kernels;
  out.waits = t.waits;
  for (trace_op& op : out.seeds) op.frames = trace_op::no_frames;
  for (trace_op& op : out.ops) op.frames = trace_op::no_frames;
  const handover h = hand_over(t, step.first_op, step.ops);
  repeats = repeats_within_bound(step, repeats);
  if (!h.ok || repeats == 0) return out;
  std::uint64_t base = 0;
  for (const trace_op& s : t.seeds) base = std::max(base, s.addr);
  for (const trace_op& op : t.ops) base = std::max(base, op.addr);
  ++base;
  const std::int64_t step_start = t.ops[step.first_op - 1].time_ns;
  const std::int64_t step_end = t.ops.back().time_ns;
  // Work recorded after the last op belongs to the step the repeats replace.
  std::erase_if(out.kernels, [&](const gpu_kernel& k) { return k.launch_ns > step_end; });
  std::erase_if(out.waits, [&](const host_wait& w) { return w.start_ns > step_end; });
  out.ops.reserve(t.ops.size() + repeats * step.ops);
  std::vector<std::uint64_t> previous = h.carried_out_addr;
  std::vector<std::uint64_t> next(previous.size());
  std::unordered_map<std::uint64_t, std::uint64_t> renamed;  // this repeat's live blocks
  for (std::size_t k = 1; k <= repeats; ++k) {
    const auto shift = static_cast<std::int64_t>(k) * step.span_ns;
    renamed.clear();
    for (std::size_t j = 0; j < step.ops; ++j) {
      trace_op op = t.ops[step.first_op + j];
      op.time_ns += shift;
      const std::int32_t q = h.pair_of_op[j];
      if (op.kind == op_kind::alloc) {
        const std::uint64_t addr = base + (k - 1) * step.ops + j;
        renamed[op.addr] = addr;
        if (q != none) next[static_cast<std::size_t>(q)] = addr;
        op.addr = addr;
      } else if (auto it = renamed.find(op.addr); it != renamed.end()) {
        op.addr = it->second;
        renamed.erase(it);
      } else {
        op.addr = previous[static_cast<std::size_t>(q)];
      }
      op.frames = trace_op::no_frames;
      out.ops.push_back(op);
    }
    std::swap(previous, next);
    for (const gpu_kernel& kernel : t.kernels) {
      if (kernel.launch_ns <= step_start || kernel.launch_ns > step_end) continue;
      out.kernels.push_back(
          {kernel.launch_ns + shift, kernel.start_ns + shift, kernel.duration_ns});
    }
    for (const host_wait& w : t.waits) {
      if (w.start_ns <= step_start || w.start_ns > step_end) continue;
      out.waits.push_back({w.start_ns + shift, w.end_ns + shift});
    }
  }
  return out;
}

}  // namespace strata::replay
