#include "sim_config.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "strata/option_table.hpp"

namespace strata {

namespace {

status bad_config(std::string message) {
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

constexpr option_rule call_cost(std::string_view name, std::string_view doc) {
  return {.name = name,
          .kind = value_kind::number,
          .high = max_sim_call_us,
          .unit = "microseconds",
          .doc = doc};
}

std::uint64_t* fault(sim_config& c, sim_fault f) {
  return &c.fail_after[static_cast<std::size_t>(f)];
}

const std::array<spec, 26> table{{
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
    {delay("gpu_lag_us",
           "how far the GPU runs behind the host: work queued at host time t starts no earlier "
           "than t + this (a host wait for queued work then costs it)"),
     [](sim_config& c) -> option_field { return &c.gpu_lag_us; }},
    {{.name = "driver_costs",
      .kind = value_kind::text,
      .unit = "`h100` or `none`",
      .doc = "`none`: the driver-call costs below that are not given are 0 (tests of other "
             "modeled times)"},
     [](sim_config& c) -> option_field { return &c.driver_costs; }},
    {call_cost("create_us",
               "what a `create_pages` call costs the calling thread (H100 in training, "
               "2 MiB runs: 14, idle: 9.9)"),
     [](sim_config& c) -> option_field { return &c.create_us; }},
    {call_cost("create_page_us",
               "what each 2 MiB of a run beyond its first adds to "
               "`create_pages` (H200: 0.13)"),
     [](sim_config& c) -> option_field { return &c.create_page_us; }},
    {call_cost("map_us", "what a `map` call costs (H100 in training: 2.2, idle: 1.7)"),
     [](sim_config& c) -> option_field { return &c.map_us; }},
    {call_cost("set_access_us",
               "what `set_access` costs per mapping in its range (H100 in "
               "training: 30, idle: 28.8)"),
     [](sim_config& c) -> option_field { return &c.set_access_us; }},
    {call_cost("set_access_page_us",
               "what each 2 MiB of a mapping beyond its first adds to "
               "`set_access` (H200: 0.15)"),
     [](sim_config& c) -> option_field { return &c.set_access_page_us; }},
    {call_cost("unmap_us",
               "what `unmap` costs per mapping in its range (H100 in training: 30, "
               "idle: 18.0)"),
     [](sim_config& c) -> option_field { return &c.unmap_us; }},
    {call_cost("release_us", "what a `release_pages` call costs (H100, GPU busy: 17, idle: 10.3)"),
     [](sim_config& c) -> option_field { return &c.release_us; }},
    {call_cost("release_page_us",
               "what each 2 MiB of a run beyond its first adds to "
               "`release_pages` (H200: 1.2)"),
     [](sim_config& c) -> option_field { return &c.release_page_us; }},
    {call_cost("record_event_us",
               "what `record_event` costs the calling thread (H100 in training: 1.7; idle: 0.15)"),
     [](sim_config& c) -> option_field { return &c.record_event_us; }},
    {call_cost("query_event_us",
               "what `query_event` costs the calling thread (H100 in training: 1.9; idle: 0.13)"),
     [](sim_config& c) -> option_field { return &c.query_event_us; }},
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
    return bad_config("bad value for 'data': `" + config.data + "` is not `host` or `none`");
  }
  if (config.driver_costs != "h100" && config.driver_costs != "none") {
    return bad_config("bad value for 'driver_costs': `" + config.driver_costs +
                      "` is not `h100` or `none`");
  }
  if (config.driver_costs == "none") {
    const auto given = [&](std::string_view key) {
      return std::any_of(options->begin(), options->end(),
                         [&](const option& o) { return o.key == key; });
    };
    for (auto [key, field] : {std::pair{"create_us", &config.create_us},
                              {"create_page_us", &config.create_page_us},
                              {"map_us", &config.map_us},
                              {"set_access_us", &config.set_access_us},
                              {"set_access_page_us", &config.set_access_page_us},
                              {"unmap_us", &config.unmap_us},
                              {"release_us", &config.release_us},
                              {"release_page_us", &config.release_page_us},
                              {"record_event_us", &config.record_event_us},
                              {"query_event_us", &config.query_event_us}}) {
      if (!given(key)) *field = 0;
    }
  }
  if (config.capacity < config.granularity || config.capacity % config.granularity != 0) {
    return bad_config("bad value for 'capacity': " + format_bytes(config.capacity) +
                      " is not a positive multiple of the granularity " +
                      format_bytes(config.granularity));
  }
  return config;
}

}  // namespace strata
