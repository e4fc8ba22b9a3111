#include "sim_config.hpp"

#include <bit>
#include <string>

#include "option_list.hpp"

namespace strata {

namespace {

constexpr std::string_view accepted_keys =
    "capacity, granularity, h2d_gbps, d2h_gbps, d2d_gbps, copy_latency_us, op_delay_us, "
    "adopt_streams, fail_create_page_after, fail_map_after, fail_copy_after, fail_host_alloc_after";

status invalid(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

// Applies one key=value to `config`.
status apply(sim_config& config, const option& opt) {
  const auto set_size = [&](std::uint64_t& field) -> status {
    auto v = parse_byte_size(opt.key, opt.value);
    if (!v) return v.error();
    field = *v;
    return {};
  };
  const auto set_count = [&](std::uint64_t& field) -> status {
    auto v = parse_count(opt.key, opt.value);
    if (!v) return v.error();
    field = *v;
    return {};
  };
  // A delay of at most 10 s: more is a typo, and would stall every stream.
  const auto set_delay = [&](std::uint64_t& field) -> status {
    auto v = parse_count(opt.key, opt.value);
    if (!v) return v.error();
    if (*v > max_sim_delay_us) {
      return invalid("bad value '" + std::string(opt.value) + "' for '" + std::string(opt.key) +
                     "': expected microseconds from 0 to " + std::to_string(max_sim_delay_us));
    }
    field = *v;
    return {};
  };
  const auto set_rate = [&](double& field) -> status {
    auto v = parse_rate(opt.key, opt.value);
    if (!v) return v.error();
    field = *v;
    return {};
  };
  const auto fault = [&](sim_fault f) -> std::uint64_t& {
    return config.fail_after[static_cast<std::size_t>(f)];
  };

  if (opt.key == "capacity") return set_size(config.capacity);
  if (opt.key == "granularity") return set_size(config.granularity);
  if (opt.key == "h2d_gbps") return set_rate(config.h2d_gbps);
  if (opt.key == "d2h_gbps") return set_rate(config.d2h_gbps);
  if (opt.key == "d2d_gbps") return set_rate(config.d2d_gbps);
  if (opt.key == "copy_latency_us") return set_delay(config.copy_latency_us);
  if (opt.key == "op_delay_us") return set_delay(config.op_delay_us);
  if (opt.key == "adopt_streams") {
    if (opt.value != "true" && opt.value != "false") {
      return invalid("bad value '" + std::string(opt.value) +
                     "' for 'adopt_streams': expected true or false");
    }
    config.adopt_streams = opt.value == "true";
    return {};
  }
  if (opt.key == "fail_create_page_after") return set_count(fault(sim_fault::create_pages));
  if (opt.key == "fail_map_after") return set_count(fault(sim_fault::map));
  if (opt.key == "fail_copy_after") return set_count(fault(sim_fault::copy));
  if (opt.key == "fail_host_alloc_after") return set_count(fault(sim_fault::host_alloc));
  return invalid("unknown sim device key '" + std::string(opt.key) +
                 "'; accepted keys: " + std::string(accepted_keys));
}

}  // namespace

result<sim_config> parse_sim_config(std::string_view text) {
  auto options = parse_option_list(text, '=', "sim device spec");
  if (!options) return options.error();
  sim_config config;
  for (const auto& opt : *options) {
    if (auto s = apply(config, opt); !s) return s;
  }
  if (config.granularity < 4096 || config.granularity > max_sim_granularity ||
      !std::has_single_bit(config.granularity)) {
    return invalid("bad value for 'granularity': " + std::to_string(config.granularity) +
                   " is not a power of two from 4 KiB to 1 GiB");
  }
  if (config.capacity > max_sim_capacity) {
    return invalid("bad value for 'capacity': " + format_bytes(config.capacity) +
                   " is more than the sim device's limit of " + format_bytes(max_sim_capacity) +
                   " (its address space is twice the capacity)");
  }
  if (config.capacity < config.granularity || config.capacity % config.granularity != 0) {
    return invalid("bad value for 'capacity': " + format_bytes(config.capacity) +
                   " is not a positive multiple of the granularity " +
                   format_bytes(config.granularity));
  }
  return config;
}

}  // namespace strata
