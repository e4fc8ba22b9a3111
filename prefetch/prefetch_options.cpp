// The prefetch section of STRATA_CONF: the table of prefetch_options, its
// check and its conf_section (strata/conf_text.hpp). docs/configuration.md's
// "prefetch" table is rendered from this table, and a test keeps the two
// equal.
#include <array>

#include "strata/prefetch_options.hpp"

namespace strata {

namespace {

using prefetch_spec = option_spec<prefetch_options>;

const std::array<prefetch_spec, 4> prefetch_rows{{
    {bytes_rule("prefetch_bytes", 0, option_no_max,
                "the most device bytes in prefetch fills in flight plus buffers "
                "prefetched and not yet acquired ([prefetch.md](prefetch.md)); `0` turns prefetch "
                "off"),
     [](prefetch_options& o) -> option_field { return &o.prefetch_bytes; }},
    {{.name = "prefetch_inflight",
      .kind = value_kind::count,
      .min = 1,
      .max = 1024,
      .doc = "prefetch fills outstanding at once (NVMe reads and host-to-device "
             "copies)"},
     [](prefetch_options& o) -> option_field { return &o.prefetch_inflight; }},
    {bytes_rule("device_lookahead", 0, option_no_max,
                "how far ahead, in bytes of upcoming acquires, buffers are copied to the "
                "device (within `prefetch_bytes`)"),
     [](prefetch_options& o) -> option_field { return &o.device_lookahead; }},
    {bytes_rule("reuse_distance", 0, option_no_max,
                "a released buffer needed again within this many bytes of acquires "
                "stays on the device unless nothing else can be spilled"),
     [](prefetch_options& o) -> option_field { return &o.reuse_distance; }},
}};

constexpr conf_section prefetch_section =
    make_conf_section<prefetch_options, prefetch_option_table, check_prefetch_options>("prefetch");

}  // namespace

std::span<const option_spec<prefetch_options>> prefetch_option_table() {
  return prefetch_rows;
}

status check_prefetch_options(const prefetch_options& options) {
  return check_options(prefetch_option_table(), options);
}

result<prefetch_options> prefetch_options_from(const conf_text& conf, prefetch_options defaults) {
  return section_from(conf, prefetch_option_table(), defaults);
}

result<prefetch_options> parse_prefetch_conf(std::string_view text) {
  return parse_section(text, prefetch_options_from);
}

const conf_section& prefetch_conf_section() {
  return prefetch_section;
}

}  // namespace strata
