#include "event_trace.hpp"

#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace strata {

const char* trace_action_name(trace_action a) noexcept {
  switch (a) {
    case trace_action::alloc:
      return "alloc";
    case trace_action::free_requested:
      return "free_requested";
    case trace_action::free_completed:
      return "free_completed";
    case trace_action::segment_map:
      return "segment_map";
    case trace_action::segment_unmap:
      return "segment_unmap";
    case trace_action::stitch:
      return "stitch";
    case trace_action::oom:
      return "oom";
    case trace_action::segment_alloc:
      return "segment_alloc";
    case trace_action::segment_free:
      return "segment_free";
  }
  return "unknown";
}

void event_trace::record(trace_action action, std::uintptr_t address, std::size_t size,
                         const void* stream) noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  trace_event& e = ring_[next_ % ring_.size()];
  e.time_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  e.action = action;
  e.address = address;
  e.size = size;
  e.stream = reinterpret_cast<std::uintptr_t>(stream);
  e.seq = next_;
  if (frames_.on()) frames_.capture(next_);
  ++next_;
}

std::vector<trace_event> event_trace::events() const {
  std::vector<trace_event> out;
  const std::uint64_t first = dropped();
  out.reserve(static_cast<std::size_t>(next_ - first));
  for (std::uint64_t i = first; i < next_; ++i) out.push_back(ring_[i % ring_.size()]);
  return out;
}

std::string event_trace::to_json() const {
  std::string o = "{\"capacity\":" + std::to_string(ring_.size()) +
                  ",\"recorded\":" + std::to_string(next_) +
                  ",\"dropped\":" + std::to_string(dropped()) + ",\"events\":[";
  bool first = true;
  char buf[192];
  for (const trace_event& e : events()) {
    std::snprintf(buf, sizeof buf,
                  "%s{\"time_ns\":%" PRId64 ",\"action\":\"%s\",\"address\":\"0x%" PRIxPTR
                  "\",\"size\":%zu,\"stream\":\"0x%" PRIxPTR "\"}",
                  first ? "" : ",", e.time_ns, trace_action_name(e.action), e.address, e.size,
                  e.stream);
    o += buf;
    first = false;
  }
  o += "]}";
  return o;
}

}  // namespace strata
