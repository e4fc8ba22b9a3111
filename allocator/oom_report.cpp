#include "oom_report.hpp"

#include <cinttypes>
#include <cstdio>

#include "option_list.hpp"

namespace strata {

namespace {

std::string hex(std::uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, v);
  return buf;
}

}  // namespace

void oom_report::decide() {
  const std::size_t other_users = device_free_known && capacity > reserved + device_free
                                      ? capacity - reserved - device_free
                                      : 0;
  if (needed > limit) {
    // No spill helps: one block cannot be larger than what the allocator may hold.
    verdict = "the request alone (" + format_bytes(needed) + ") exceeds the allocator's limit (" +
              format_bytes(limit) + "): ";
    if (memory_fraction < 1.0 && needed <= capacity) {
      char f[32];
      std::snprintf(f, sizeof f, "%.3f",
                    static_cast<double>(needed) / static_cast<double>(capacity));
      verdict += "raise memory_fraction to at least " + std::string(f) + " or reduce the batch";
    } else {
      verdict += "needs " + format_bytes(needed - limit) +
                 " more than the device has in one block: reduce the batch or split the tensor";
    }
    return;
  }
  const std::size_t missing = needed > obtainable ? needed - obtainable : 0;
  if (pending_bytes > 0 && pending_bytes >= missing) {
    verdict = "fits after the " + format_bytes(pending_on_stream) + " pending free on stream " +
              hex(pending_stream) + " completes";
    return;
  }
  if (missing == 0) {
    verdict = "fits now: memory came free while the report was built; retry";
    return;
  }
  verdict = "needs " + format_bytes(missing) + " more than the device has: spill at least " +
            format_bytes(missing) + " to host memory or reduce the batch";
  if (other_users > 0) {
    verdict += " (other users of the device hold " + format_bytes(other_users) + ")";
  }
  if (reserved_unallocated >= missing) {
    verdict += "; " + format_bytes(reserved_unallocated) +
               " of reserved memory is free but in pages shared with live blocks";
  }
}

std::string oom_report::to_text() const {
  std::string t = "out of memory: cannot allocate " + format_bytes(requested) + " (" +
                  std::to_string(requested) + " bytes) on stream " + hex(stream) + ".\n";
  t += "  device capacity " + format_bytes(capacity) + ", device free " +
       (device_free_known ? format_bytes(device_free) : std::string("unknown")) +
       ", allocator limit " + format_bytes(limit) + "\n";
  t += "  allocated " + format_bytes(allocated) + ", reserved " + format_bytes(reserved) +
       ", reserved but unallocated " + format_bytes(reserved_unallocated) +
       ", largest contiguous free range " + format_bytes(largest_free_range) + "\n";
  if (pending_bytes > 0) t += "  pending frees " + format_bytes(pending_bytes) + "\n";
  if (handlers_asked > 0) {
    t += "  pressure handlers asked for " + format_bytes(handlers_asked) + ", freed " +
         format_bytes(handlers_freed) +
         (handler_failures > 0 ? ", " + std::to_string(handler_failures) + " failed" : "") + "\n";
  }
  if (!largest_live.empty()) {
    t += "  largest live blocks:";
    for (const live_block& b : largest_live) {
      t +=
          " " + format_bytes(b.size) + " at " + hex(b.address) + " (stream " + hex(b.stream) + ");";
    }
    t.back() = '\n';
  }
  t += "  verdict: " + verdict;
  return t;
}

std::string oom_report::to_json() const {
  std::string j =
      "{\"requested\":" + std::to_string(requested) + ",\"needed\":" + std::to_string(needed) +
      ",\"stream\":\"" + hex(stream) + "\",\"capacity\":" + std::to_string(capacity) +
      ",\"device_free\":" +
      (device_free_known ? std::to_string(device_free) : std::string("null")) +
      ",\"limit\":" + std::to_string(limit) + ",\"allocated\":" + std::to_string(allocated) +
      ",\"reserved\":" + std::to_string(reserved) +
      ",\"reserved_unallocated\":" + std::to_string(reserved_unallocated) +
      ",\"largest_free_range\":" + std::to_string(largest_free_range) +
      ",\"pending_bytes\":" + std::to_string(pending_bytes) +
      ",\"handlers_asked\":" + std::to_string(handlers_asked) +
      ",\"handlers_freed\":" + std::to_string(handlers_freed) +
      ",\"handler_failures\":" + std::to_string(handler_failures) + ",\"largest_live\":[";
  bool first = true;
  for (const live_block& b : largest_live) {
    j += std::string(first ? "" : ",") + "{\"address\":\"" + hex(b.address) +
         "\",\"size\":" + std::to_string(b.size) + ",\"stream\":\"" + hex(b.stream) + "\"}";
    first = false;
  }
  j += "],\"verdict\":\"" + verdict + "\"}";
  return j;
}

}  // namespace strata
