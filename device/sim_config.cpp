#include "sim_config.hpp"

#include <string>

#include "strata/option_table.hpp"

namespace strata {

namespace {

status invalid(std::string message) {
  return {errc::invalid_argument, std::move(message)};
}

using spec = option_spec<sim_config>;

constexpr option_rule gbps(std::string_view name, std::string_view doc) {
  return {
      .name = name, .kind = value_kind::number, .high = max_sim_gbps, .unit = "GB/s", .doc = doc};
}

constexpr option_rule delay(std::string_view name, std::string_view doc) {
  return {.name = name,
          .kind = value_kind::count,
          .max = max_sim_delay_us,
          .unit = "microseconds",
          .doc = doc};
}

constexpr option_rule fault_after(std::string_view name, std::string_view doc) {
  return {.name = name,
          .kind = value_kind::count,
          .none_word = "never",
          .none_value = sim_fault_never,
          .unit = "a count of calls",
          .doc = doc};
}

std::uint64_t* fault(sim_config& c, sim_fault f) {
  return &c.fail_after[static_cast<std::size_t>(f)];
}

const std::array<spec, 14> table{{
    {{.name = "capacity",
      .kind = value_kind::bytes,
      .min = 4096,
      .max = max_sim_capacity,
      .doc = "physical memory; a multiple of the granularity (the device reserves twice its "
             "capacity of address space)"},
     [](sim_config& c) -> option_field { return &c.capacity; }},
    {{.name = "granularity",
      .kind = value_kind::bytes,
      .min = 4096,
      .max = max_sim_granularity,
      .power_of_two = true,
      .doc = "page size"},
     [](sim_config& c) -> option_field { return &c.granularity; }},
    {gbps("h2d_gbps", "host-to-device copy rate (10^9 B/s); 0 = instant"),
     [](sim_config& c) -> option_field { return &c.h2d_gbps; }},
    {gbps("d2h_gbps", "device-to-host copy rate; 0 = instant"),
     [](sim_config& c) -> option_field { return &c.d2h_gbps; }},
    {gbps("d2d_gbps", "device-to-device copy rate; 0 = instant"),
     [](sim_config& c) -> option_field { return &c.d2d_gbps; }},
    {{.name = "tflops",
      .kind = value_kind::number,
      .high = max_sim_tflops,
      .unit = "10^12 FLOP/s",
      .doc = "timing only: the compute rate of modeled kernels (`queue_modeled_kernel`; their "
             "bytes go at `d2d_gbps`); 0 = instant"},
     [](sim_config& c) -> option_field { return &c.tflops; }},
    {delay("copy_latency_us", "fixed time added to every copy"),
     [](sim_config& c) -> option_field { return &c.copy_latency_us; }},
    {delay("op_delay_us", "time slept before every stream operation (a slow stream)"),
     [](sim_config& c) -> option_field { return &c.op_delay_us; }},
    {{.name = "adopt_streams",
      .kind = value_kind::flag,
      .doc = "`true`: a stream handle the device did not create (say, from a CUDA runtime the "
             "program loaded) becomes a new stream of its own on first use instead of an "
             "\"unknown stream\" error; the preload shim's tests use it"},
     [](sim_config& c) -> option_field { return &c.adopt_streams; }},
    {{.name = "data",
      .kind = value_kind::text,
      .unit = "`host` or `none`",
      .doc = "`none`: timing only (`strata plan`): pages, mappings and capacity are accounted as "
             "with `host`; copies, memsets and modeled kernels move no bytes and advance a "
             "modeled clock instead of taking real time (\"Modeled time\" below); the host "
             "cannot use the memory"},
     [](sim_config& c) -> option_field { return &c.data; }},
    {fault_after("fail_create_page_after",
                 "after N successful `create_pages`, the next one fails once with "
                 "`injected_fault`"),
     [](sim_config& c) -> option_field { return fault(c, sim_fault::create_pages); }},
    {fault_after("fail_map_after", "the same for `map`"),
     [](sim_config& c) -> option_field { return fault(c, sim_fault::map); }},
    {fault_after("fail_copy_after", "the same for `copy_async`"),
     [](sim_config& c) -> option_field { return fault(c, sim_fault::copy); }},
    {fault_after("fail_host_alloc_after", "the same for `host_alloc`"),
     [](sim_config& c) -> option_field { return fault(c, sim_fault::host_alloc); }},
}};

}  // namespace

std::span<const option_spec<sim_config>> sim_config_table() {
  return table;
}

result<sim_config> parse_sim_config(std::string_view text) {
  auto options = parse_option_list(text, '=', "sim device spec");
  if (!options) return options.error();
  sim_config config;
  if (auto s = apply_options(sim_config_table(), *options, config, "sim device spec"); !s) {
    return s;
  }
  if (config.data != "host" && config.data != "none") {
    return invalid("bad value for 'data': `" + config.data + "` is not `host` or `none`");
  }
  if (config.capacity < config.granularity || config.capacity % config.granularity != 0) {
    return invalid("bad value for 'capacity': " + format_bytes(config.capacity) +
                   " is not a positive multiple of the granularity " +
                   format_bytes(config.granularity));
  }
  return config;
}

}  // namespace strata
