// Option text: the one grammar of STRATA_CONF and of device specs, the
// values in it, and the option tables that drive parsing, validation, error
// messages and the documentation's tables.
//
// Grammar (docs/configuration.md, "Syntax"), the same for both:
//   list := item (',' item)*      an empty text is an empty list
//   item := key SEP value         SEP is ':' in STRATA_CONF, '=' in a device spec
// Spaces and tabs around keys and values are ignored. An empty item (a
// leading, trailing or doubled comma), an item without SEP, an empty key or
// value, and a key given twice are errors.
//
// Values, by kind:
//   bytes   digits with an optional unit B, KiB, MiB, GiB, TiB (powers of
//           1024) or KB, MB, GB, TB (powers of 1000); a fraction only where
//           it gives whole bytes ("1.5GiB"); no exponent, no sign
//   count   a non-negative decimal integer
//   number  a finite decimal number, exponent allowed ("0.5", "1e3")
//   flag    true or false
//   text    any non-empty text without commas
// A bytes or count option may also accept a word (`none`, `never`) stored as
// a sentinel value the option names.
//
// An option table lists, for one configuration struct, every key: its kind,
// range, one-line doc and where it lives in the struct. apply_options()
// parses and range-checks against it; check_options() range-checks a struct
// a program filled in itself; options_markdown() renders the table that
// docs/configuration.md and docs/device.md hold (a test compares them).
//
// Thread safety: pure functions over constant tables; may be called
// concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "strata/error.hpp"
#include "strata/export.hpp"

namespace strata {

/// One key/value item of an option list (views into the parsed text).
struct option {
  std::string_view key;
  std::string_view value;
};

/// Splits `text` into items by the grammar above, with `separator` between
/// key and value. With `nested_key` (STRATA_CONF's "device"), an item with
/// '=' before any `separator` continues the value of the `nested_key` item
/// just before it, comma included: "device:sim:capacity=8GiB,granularity=2MiB"
/// gives device = "sim:capacity=8GiB,granularity=2MiB". Errors:
/// invalid_argument naming `context` and the item.
STRATA_API result<std::vector<option>> parse_option_list(std::string_view text, char separator,
                                                         std::string_view context,
                                                         std::string_view nested_key = {});

/// A byte count (kind `bytes` above). Errors: invalid_argument naming `key`
/// (bad syntax, unknown unit, fraction of a byte, 2^64 or more).
STRATA_API result<std::uint64_t> parse_byte_size(std::string_view key, std::string_view text);

/// A non-negative decimal integer. Errors: invalid_argument naming `key`.
STRATA_API result<std::uint64_t> parse_count(std::string_view key, std::string_view text);

/// A finite decimal number, exponent allowed. Errors: invalid_argument
/// naming `key`.
STRATA_API result<double> parse_number(std::string_view key, std::string_view text);

/// A byte count for people: "80 GiB", "1.50 MiB", "512 B".
STRATA_API std::string format_bytes(std::uint64_t bytes);

/// A byte count as option text: "80GiB", "512KiB", "4096" (the largest
/// unit that divides it, so the text parses back to the same value).
STRATA_API std::string format_byte_option(std::uint64_t bytes);

enum class value_kind : std::uint8_t { bytes, count, number, flag, text };

/// A `text` option stored in its layer's own type (an enum, an optional):
/// the layer's two functions convert it from and to option text.
struct option_converter {
  void* target = nullptr;
  /// Stores `value` in `*target`; false for a value the option does not take.
  bool (*set)(void* target, std::string_view value) = nullptr;
  /// The value in `*target` as option text.
  std::string (*text)(const void* target) = nullptr;
};

/// Where an option's value lives in its struct.
using option_field = std::variant<std::uint64_t*, double*, bool*, std::string*, option_converter>;

/// The part of a table row that does not depend on the struct.
struct option_rule {
  std::string_view name{};
  value_kind kind = value_kind::text;
  /// bytes, count: the inclusive range; a non-empty `none_word` ("none",
  /// "never") is accepted too, stored as `none_value` (and shown as the word
  /// when the value equals it).
  std::uint64_t min = 0;
  std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  std::string_view none_word{};
  std::uint64_t none_value = 0;
  /// bytes: the value must be a power of two.
  bool power_of_two = false;
  /// number: the range [low, high], or (low, high] when `low_open`.
  double low = 0;
  double high = 0;
  bool low_open = false;
  /// What the values are, for messages ("microseconds", "a device spec");
  /// empty: the kind's own words.
  std::string_view unit{};
  /// One line: what the option does.
  std::string_view doc{};
};

/// No upper bound: the `max` of a bytes or count rule that takes any value.
inline constexpr std::uint64_t option_no_max = std::numeric_limits<std::uint64_t>::max();

/// Rule shorthands for the tables' common rows.
/// A flag: `true` or `false`.
constexpr option_rule flag_rule(std::string_view name, std::string_view doc) {
  return {.name = name, .kind = value_kind::flag, .doc = doc};
}

/// A byte size in [min, max].
constexpr option_rule bytes_rule(std::string_view name, std::uint64_t min, std::uint64_t max,
                                 std::string_view doc) {
  return {.name = name, .kind = value_kind::bytes, .min = min, .max = max, .doc = doc};
}

/// A byte size of at least `min`, or `none`, stored as `none_value` (0 or
/// the largest value). Where `none` is stored as 0, 0 itself is not
/// accepted (it would read as `none`): such a key's `min` is above 0.
constexpr option_rule bytes_or_none_rule(std::string_view name, std::uint64_t min,
                                         std::uint64_t none_value, std::string_view doc) {
  return {.name = name,
          .kind = value_kind::bytes,
          .min = min,
          .none_word = "none",
          .none_value = none_value,
          .doc = doc};
}

/// A count in [min, max].
constexpr option_rule count_rule(std::string_view name, std::uint64_t min, std::uint64_t max,
                                 std::string_view doc) {
  return {.name = name, .kind = value_kind::count, .min = min, .max = max, .doc = doc};
}

/// A table row for configuration struct `Config`.
template <class Config>
struct option_spec {
  option_rule rule;
  option_field (*field)(Config&);
};

/// Parses `value` by `rule` into `field` (whose type must match the kind).
/// Errors: invalid_argument "bad value 'V' for 'KEY': expected WHAT".
STRATA_API status set_option(const option_rule& rule, std::string_view value, option_field field);

/// Checks the value in `field` against `rule` (for structs filled in by a
/// program, not parsed). Errors: invalid_argument naming the key.
STRATA_API status check_option(const option_rule& rule, option_field field);

/// What `rule` accepts, as messages and the docs say it: "4KiB to 1GiB",
/// "a byte size or 'none'", "true or false", "a number in (0, 1]".
STRATA_API std::string accepted_values(const option_rule& rule);

/// The value in `field` as option text ("2MiB", "none", "0.05", "true").
STRATA_API std::string option_text(const option_rule& rule, option_field field);

/// Applies `items` to `config` by `table`. Errors: invalid_argument for an
/// unknown key (listing the table's keys, prefixed by `context`) or a bad
/// value. `config` is left partly updated on error.
template <class Config>
status apply_options(std::span<const option_spec<Config>> table, std::span<const option> items,
                     Config& config, std::string_view context) {
  for (const option& item : items) {
    const option_spec<Config>* spec = nullptr;
    for (const auto& row : table) {
      if (row.rule.name == item.key) spec = &row;
    }
    if (spec == nullptr) {
      std::string keys;
      for (const auto& row : table) keys += (keys.empty() ? "" : ", ") + std::string(row.rule.name);
      return {errc::invalid_argument, std::string(context) + ": unknown key '" +
                                          std::string(item.key) + "'; accepted keys: " + keys};
    }
    if (auto s = set_option(spec->rule, item.value, spec->field(config)); !s) return s;
  }
  return {};
}

/// Range-checks every field of `config` by `table` (see check_option).
template <class Config>
status check_options(std::span<const option_spec<Config>> table, const Config& config) {
  Config copy = config;  // the rows' field accessors take a mutable struct
  for (const auto& row : table) {
    if (auto s = check_option(row.rule, row.field(copy)); !s) return s;
  }
  return {};
}

/// One Markdown table row: | `key` | default | accepted values | doc |.
STRATA_API std::string options_markdown_row(const option_rule& rule, option_field default_value);

/// The Markdown table of `table` with the defaults of a value-initialized
/// `Config` (header and one row per key, in table order).
template <class Config>
std::string options_markdown(std::span<const option_spec<Config>> table) {
  Config defaults{};
  std::string out =
      "| key | default | accepted values | meaning "
      "|\n|-----|---------|-----------------|---------|\n";
  for (const auto& row : table) out += options_markdown_row(row.rule, row.field(defaults));
  return out;
}

}  // namespace strata
