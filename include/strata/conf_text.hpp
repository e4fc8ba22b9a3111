// STRATA_CONF, parsed once and handed out by section.
//
// Each layer owns its section of the one options table: its options
// struct, the table's rows for its keys (default, range, doc) and its
// checks, in the layer's own files, next to the code the keys drive:
//   allocator     strata/allocator_options.hpp   allocator/allocator_options.cpp
//   tiers         strata/tier_options.hpp        tiers/tier_options.cpp
//   prefetch      strata/prefetch_options.hpp    prefetch/prefetch_options.cpp
//   gradients     strata/bucket_options.hpp      gradients/bucket_options.cpp
//   integrations  strata/integration_options.hpp integrations/integration_options.cpp
// conf_sections() lists them (conf/conf_text.cpp); those files are built
// into one library with it, so every program that reads STRATA_CONF knows
// every key, whichever layers it runs. A program entry (a C API create
// call, the integrations, the tools) parses the text once into a
// conf_text, which checks every key and value against the section owning
// it, then hands each layer the text to take its section from
// (allocator_options_from, tier_options_from, ...). Nothing is silently
// ignored: an unknown key is an error listing the keys there are.
//
// Thread safety: constant tables and values; every function and every
// const member may be called concurrently.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

class conf_text;

/// One layer's part of STRATA_CONF (see above).
struct conf_section {
  /// "allocator", "tiers", "prefetch", "gradients", "integrations".
  std::string_view name{};
  /// Whether `key` is one of the section's keys.
  bool (*has_key)(std::string_view key) = nullptr;
  /// The section's keys, in table order.
  std::vector<std::string_view> (*keys)() = nullptr;
  /// Checks the section's items of `text` over the section's defaults,
  /// cross-field rules included. Errors: invalid_argument naming the key.
  status (*check)(const conf_text& text) = nullptr;
  /// The section's Markdown table (options_markdown of its table).
  std::string (*markdown)() = nullptr;
};

/// Every section, in the layers' order (docs/configuration.md's and the
/// unknown-key message's): allocator, tiers, prefetch, gradients,
/// integrations.
STRATA_API std::span<const conf_section* const> conf_sections();

/// STRATA_CONF text parsed once: its items, each key owned by a section
/// and each value checked by that section.
class conf_text {
 public:
  /// An empty text: every section's defaults.
  conf_text() = default;

  /// Parses `text` by STRATA_CONF's grammar (strata/option_table.hpp; the
  /// `device` key's value may hold commas). Errors: invalid_argument for
  /// the grammar's faults, a key no section owns (the message lists the
  /// keys there are) and a bad value (naming the key and what it takes).
  STRATA_API static result<conf_text> parse(std::string_view text);

  /// parse() of the STRATA_CONF environment variable (an empty text if it
  /// is unset or empty).
  STRATA_API static result<conf_text> from_env();

  /// Applies the items whose key `table` has to `config`, leaving the
  /// others. Errors: invalid_argument for a bad value (never for a table
  /// of conf_sections(): parse() checked those); `config` is then partly
  /// updated.
  template <class Config>
  status apply(std::span<const option_spec<Config>> table, Config& config) const {
    for (const auto& [key, value] : items_) {
      for (const auto& row : table) {
        if (row.rule.name != key) continue;
        if (auto s = set_option(row.rule, value, row.field(config)); !s) return s;
      }
    }
    return {};
  }

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};

/// A layer's section of `conf` over `defaults`: the items its `table` has,
/// then `across` (its rules across keys; null: none). Errors:
/// invalid_argument naming the key.
template <class Config>
result<Config> section_from(const conf_text& conf, std::span<const option_spec<Config>> table,
                            Config defaults, status (*across)(const Config&) = nullptr) {
  if (auto s = conf.apply(table, defaults); !s) return s;
  if (across != nullptr) {
    if (auto s = across(defaults); !s) return s;
  }
  return defaults;
}

/// Parses STRATA_CONF `text` once (conf_text::parse) and returns the
/// section `from` takes from it, over its defaults.
template <class Config>
result<Config> parse_section(std::string_view text,
                             result<Config> (*from)(const conf_text&, Config)) {
  auto conf = conf_text::parse(text);
  if (!conf) return conf.error();
  return from(*conf, Config{});
}

/// The conf_section of a layer whose table is `Table()` and whose
/// section-wide check (the table's ranges and the rules across keys) is
/// `Check`, a function of a `Config`.
template <class Config, std::span<const option_spec<Config>> (*Table)(),
          status (*Check)(const Config&)>
constexpr conf_section make_conf_section(std::string_view name) {
  return {
      .name = name,
      .has_key =
          [](std::string_view key) {
            return std::ranges::any_of(Table(),
                                       [&](const auto& row) { return row.rule.name == key; });
          },
      .keys =
          [] {
            std::vector<std::string_view> out;
            for (const auto& row : Table()) out.push_back(row.rule.name);
            return out;
          },
      .check =
          [](const conf_text& text) {
            Config config{};
            if (auto s = text.apply(Table(), config); !s) return s;
            return Check(config);
          },
      .markdown = [] { return options_markdown(Table()); },
  };
}

}  // namespace strata
