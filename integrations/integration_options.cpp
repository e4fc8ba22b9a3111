// The integrations' section of STRATA_CONF: the table of
// integration_options, its check and its conf_section
// (strata/conf_text.hpp). docs/configuration.md's "integrations" table is
// rendered from this table, and a test keeps the two equal.
#include <array>
#include <utility>

#include "strata/integration_options.hpp"

namespace strata {

namespace {

using integration_spec = option_spec<integration_options>;

const std::array<integration_spec, 1> integration_rows{{
    {{.name = "report_on_exit",
      .kind = value_kind::text,
      .unit = "a file path (no commas)",
      .doc = "the preload shim and the LibTorch plugin write the stats, the memory summary and "
             "the last OOM report of every device's allocator there at process exit "
             "([integrations.md](integrations.md#the-exit-report)); a `.pickle` path gets "
             "snapshots instead"},
     [](integration_options& o) -> option_field { return &o.report_on_exit; }},
}};

constexpr conf_section integration_section =
    make_conf_section<integration_options, integration_option_table, check_integration_options>(
        "integrations");

}  // namespace

std::span<const option_spec<integration_options>> integration_option_table() {
  return integration_rows;
}

const conf_section& integration_conf_section() {
  return integration_section;
}

status check_integration_options(const integration_options& options) {
  return check_options(integration_option_table(), options);
}

result<integration_options> integration_options_from(const conf_text& conf,
                                                     integration_options defaults) {
  return section_from(conf, integration_option_table(), std::move(defaults));
}

}  // namespace strata
