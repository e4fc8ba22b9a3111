#include "strata/allocator_options.hpp"

#include <cstdlib>
#include <vector>

#include "option_list.hpp"

namespace strata {

namespace {

constexpr std::string_view accepted_keys =
    "device, release_threshold, small_size, memory_fraction, wait_before_grow, trace_buffer, "
    "trace_frames, log_ooms, report_on_exit, host_capacity, host_chunk, host_large, host_kept, "
    "nvme_dir, "
    "nvme_block_size, nvme_queue_depth, nvme_capacity, nvme_verify";

status invalid(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

struct conf_item {
  std::string_view key;
  std::string value;
};

// Splits STRATA_CONF into key:value items, gluing key=value items onto a
// preceding device spec.
result<std::vector<conf_item>> split_conf(std::string_view text) {
  std::vector<conf_item> items;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) return invalid("STRATA_CONF: empty item (two commas in a row?)");
    const auto colon = item.find(':');
    const auto equals = item.find('=');
    if (equals < colon) {
      if (items.empty() || items.back().key != "device") {
        return invalid("STRATA_CONF: '" + std::string(item) +
                       "' is not of the form key:value (key=value items belong to a device spec)");
      }
      items.back().value += "," + std::string(item);
      continue;
    }
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == item.size()) {
      return invalid("STRATA_CONF: '" + std::string(item) + "' is not of the form key:value");
    }
    const std::string_view key = item.substr(0, colon);
    for (const auto& seen : items) {
      if (seen.key == key)
        return invalid("STRATA_CONF: key '" + std::string(key) + "' given twice");
    }
    items.push_back({key, std::string(item.substr(colon + 1))});
  }
  return items;
}

// A byte size in [low, high], or `none` (0) where `none_is_zero`.
result<std::uint64_t> byte_size_in(const conf_item& item, std::uint64_t low, std::uint64_t high,
                                   const char* accepted, bool none_is_zero) {
  if (none_is_zero && item.value == "none") return std::uint64_t{0};
  auto v = parse_byte_size(item.key, item.value);
  if (!v || *v < low || *v > high) {
    return status{errc::invalid_argument, "bad value '" + item.value + "' for '" +
                                              std::string(item.key) + "': expected " + accepted};
  }
  return *v;
}

// The offload tiers' keys; false if `item` is not one of them.
result<bool> apply_offload(offload_options& o, const conf_item& item) {
  constexpr std::uint64_t no_max = std::numeric_limits<std::uint64_t>::max();
  const auto size_into = [&](std::uint64_t& field, std::uint64_t low, std::uint64_t high,
                             const char* accepted, bool none) -> result<bool> {
    auto v = byte_size_in(item, low, high, accepted, none);
    if (!v) return v.error();
    field = *v;
    return true;
  };
  if (item.key == "host_capacity") {
    return size_into(o.host_capacity, 1, no_max, "a byte size or 'none'", true);
  }
  if (item.key == "host_chunk") {
    return size_into(o.host_chunk, 64ULL << 10, 1ULL << 30, "64KiB to 1GiB", false);
  }
  if (item.key == "host_large") {
    return size_into(o.host_large, 4096, 1ULL << 30, "4KiB to 1GiB", false);
  }
  if (item.key == "nvme_block_size") {
    return size_into(o.nvme_block_size, 4096, 1ULL << 30, "4KiB to 1GiB", false);
  }
  if (item.key == "nvme_capacity") {
    return size_into(o.nvme_capacity, 1, no_max, "a byte size or 'none'", true);
  }
  if (item.key == "host_kept") {
    auto v = parse_rate(item.key, item.value);
    if (!v || *v < 0.0 || *v > 1.0) {
      return invalid("bad value '" + item.value + "' for 'host_kept': expected a number in [0, 1]");
    }
    o.host_kept = *v;
    return true;
  }
  if (item.key == "nvme_queue_depth") {
    auto v = parse_count(item.key, item.value);
    if (!v || *v < 1 || *v > 4096) {
      return invalid("bad value '" + item.value +
                     "' for 'nvme_queue_depth': expected a count from 1 to 4096");
    }
    o.nvme_queue_depth = static_cast<unsigned>(*v);
    return true;
  }
  if (item.key == "nvme_verify") {
    if (item.value != "true" && item.value != "false") {
      return invalid("bad value '" + item.value + "' for 'nvme_verify': expected true or false");
    }
    o.nvme_verify = item.value == "true";
    return true;
  }
  if (item.key == "nvme_dir") {
    o.nvme_dir = item.value;
    return true;
  }
  return false;
}

status apply(allocator_options& o, const conf_item& item) {
  if (item.key == "device") {
    o.device = item.value;
    return {};
  }
  if (item.key == "release_threshold") {
    if (item.value == "none") {
      o.release_threshold = std::numeric_limits<std::uint64_t>::max();
      return {};
    }
    auto v = parse_byte_size(item.key, item.value);
    if (!v) return invalid(v.error().message() + " or 'none'");
    o.release_threshold = *v;
    return {};
  }
  if (item.key == "small_size") {
    auto v = parse_byte_size(item.key, item.value);
    if (!v) return v.error();
    if (*v < 512 || *v > (64ULL << 20)) {
      return invalid("bad value '" + item.value + "' for 'small_size': expected 512B to 64MiB");
    }
    o.small_size = *v;
    return {};
  }
  if (item.key == "memory_fraction") {
    auto v = parse_rate(item.key, item.value);
    if (!v || *v <= 0.0 || *v > 1.0) {
      return invalid("bad value '" + item.value +
                     "' for 'memory_fraction': expected a number in (0, 1]");
    }
    o.memory_fraction = *v;
    return {};
  }
  if (item.key == "wait_before_grow") {
    if (item.value != "true" && item.value != "false") {
      return invalid("bad value '" + item.value +
                     "' for 'wait_before_grow': expected true or false");
    }
    o.wait_before_grow = item.value == "true";
    return {};
  }
  if (item.key == "trace_frames") {
    auto v = parse_count(item.key, item.value);
    if (!v || *v > 32) {
      return invalid("bad value '" + item.value +
                     "' for 'trace_frames': expected a count of frames from 0 (none) to 32");
    }
    o.trace_frames = *v;
    return {};
  }
  if (item.key == "log_ooms") {
    if (item.value != "true" && item.value != "false") {
      return invalid("bad value '" + item.value + "' for 'log_ooms': expected true or false");
    }
    o.log_ooms = item.value == "true";
    return {};
  }
  if (item.key == "trace_buffer") {
    auto v = parse_count(item.key, item.value);
    if (!v || *v > (std::uint64_t{1} << 26)) {
      return invalid("bad value '" + item.value +
                     "' for 'trace_buffer': expected a count of events from 0 (off) to 67108864");
    }
    o.trace_buffer = *v;
    return {};
  }
  if (item.key == "report_on_exit") {
    o.report_on_exit = item.value;
    return {};
  }
  auto offload = apply_offload(o.offload, item);
  if (!offload) return offload.error();
  if (*offload) return {};
  return invalid("STRATA_CONF: unknown key '" + std::string(item.key) +
                 "'; accepted keys: " + std::string(accepted_keys));
}

}  // namespace

result<allocator_options> parse_allocator_conf(std::string_view text, allocator_options defaults) {
  auto items = split_conf(text);
  if (!items) return items.error();
  for (const auto& item : *items) {
    if (auto s = apply(defaults, item); !s) return s;
  }
  if (defaults.trace_buffer * defaults.trace_frames * sizeof(void*) > (std::uint64_t{1} << 30)) {
    return invalid("trace_buffer " + std::to_string(defaults.trace_buffer) + " x trace_frames " +
                   std::to_string(defaults.trace_frames) +
                   " needs more than 1 GiB of frames: fewer events or frames");
  }
  return defaults;
}

result<allocator_options> allocator_options_from_env() {
  const char* env = std::getenv("STRATA_CONF");  // NOLINT(concurrency-mt-unsafe): read-only
  return parse_allocator_conf(env != nullptr ? env : "");
}

}  // namespace strata
