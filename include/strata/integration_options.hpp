// Options of the integrations (the preload shim and the LibTorch plugin,
// docs/integrations.md): their section of STRATA_CONF
// (strata/conf_text.hpp). docs/configuration.md's "integrations" table is
// rendered from integration_option_table().
//
// Thread safety: plain values and pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "strata/conf_text.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

struct integration_options {
  /// Where the preload shim and the LibTorch plugin write the stats, the
  /// memory summary and the last OOM report at process exit; empty: no
  /// report.
  std::string report_on_exit{};
};

/// The integrations' STRATA_CONF keys: kind, doc, field.
STRATA_API std::span<const option_spec<integration_options>> integration_option_table();

/// This section of STRATA_CONF (strata/conf_text.hpp).
STRATA_API const conf_section& integration_conf_section();

/// Checks options a program filled in itself against the table. Errors:
/// invalid_argument naming the key.
STRATA_API status check_integration_options(const integration_options& options);

/// The integrations' section of `conf` over `defaults`. Errors:
/// invalid_argument naming the key.
STRATA_API result<integration_options> integration_options_from(const conf_text& conf,
                                                                integration_options defaults = {});

}  // namespace strata
