#include "oom_report.hpp"

#include <cinttypes>
#include <cstdio>

#include "strata/option_table.hpp"

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
  const std::size_t shared = reserved_unallocated > idle ? reserved_unallocated - idle : 0;
  if (shared >= missing) {
    verdict += "; " + format_bytes(shared) +
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
       ", reserved but unallocated " + format_bytes(reserved_unallocated) + " (" +
       format_bytes(idle) + " idle)" + ", largest contiguous free range " +
       format_bytes(largest_free_range) + "\n";
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
  std::string j;
  const auto key = [&](const char* k) {
    j += j.empty() ? '{' : ',';
    j += '"';
    j += k;
    j += "\":";
  };
  const auto num = [&](const char* k, std::uint64_t v) {
    key(k);
    j += std::to_string(v);
  };
  const auto text = [&](const char* k, const std::string& v) {
    key(k);
    j += '"' + v + '"';
  };
  num("requested", requested);
  num("needed", needed);
  text("stream", hex(stream));
  num("capacity", capacity);
  key("device_free");
  j += device_free_known ? std::to_string(device_free) : std::string("null");
  num("limit", limit);
  num("allocated", allocated);
  num("reserved", reserved);
  num("reserved_unallocated", reserved_unallocated);
  num("idle", idle);
  num("largest_free_range", largest_free_range);
  num("pending_bytes", pending_bytes);
  num("handlers_asked", handlers_asked);
  num("handlers_freed", handlers_freed);
  num("handler_failures", handler_failures);
  key("largest_live");
  j += '[';
  for (std::size_t i = 0; i < largest_live.size(); ++i) {
    const live_block& b = largest_live[i];
    j += (i == 0 ? "" : ",") + std::string(R"({"address":")") + hex(b.address) + R"(","size":)" +
         std::to_string(b.size) + R"(,"stream":")" + hex(b.stream) + R"("})";
  }
  j += ']';
  text("verdict", verdict);
  return j + '}';
}

}  // namespace strata
