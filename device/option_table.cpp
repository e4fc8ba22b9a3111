// Option tables (strata/option_table.hpp): parsing a value by its row,
// checking it, and saying what the row accepts. Every message and every
// docs table row comes from here, so they cannot disagree.
#include <array>
#include <bit>
#include <cstdio>
#include <limits>

#include "strata/option_table.hpp"

namespace strata {

namespace {

constexpr std::uint64_t no_max = std::numeric_limits<std::uint64_t>::max();

std::string number_text(double v) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%g", v);
  return buf.data();
}

std::string count_range(const option_rule& r) {
  const std::string unit = r.unit.empty() ? "a count" : std::string(r.unit);
  if (r.max == no_max) return r.min == 0 ? unit : unit + " of at least " + std::to_string(r.min);
  return unit + " from " + std::to_string(r.min) + " to " + std::to_string(r.max);
}

std::string bytes_range(const option_rule& r) {
  std::string text;
  if (r.max == no_max) {
    text = r.min == 0 ? "a byte size" : "a byte size of at least " + format_byte_option(r.min);
  } else {
    text = format_byte_option(r.min) + " to " + format_byte_option(r.max);
  }
  if (r.power_of_two) text += ", a power of two";
  return text;
}

status bad(const option_rule& r, std::string_view value) {
  return {errc::invalid_argument, "bad value '" + std::string(value) + "' for '" +
                                      std::string(r.name) + "': expected " + accepted_values(r)};
}

// The range check shared by parsing and check_option; `shown` is the value
// as the user wrote it (or as option_text renders it).
status check_value(const option_rule& r, option_field field, std::string_view shown) {
  switch (r.kind) {
    case value_kind::bytes:
    case value_kind::count: {
      const std::uint64_t v = *std::get<std::uint64_t*>(field);
      if (!r.none_word.empty() && v == r.none_value) return {};
      if (v < r.min || v > r.max) return bad(r, shown);
      if (r.power_of_two && !std::has_single_bit(v)) return bad(r, shown);
      return {};
    }
    case value_kind::number: {
      const double v = *std::get<double*>(field);
      const bool above_low = r.low_open ? v > r.low : v >= r.low;
      return above_low && v <= r.high ? status{} : bad(r, shown);
    }
    case value_kind::flag:
    case value_kind::text:
      return {};
  }
  return bad(r, shown);
}

}  // namespace

std::string format_byte_option(std::uint64_t bytes) {
  constexpr std::array<std::pair<std::string_view, unsigned>, 4> units{
      {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}}};
  for (const auto& [name, shift] : units) {
    if (bytes != 0 && bytes % (std::uint64_t{1} << shift) == 0) {
      return std::to_string(bytes >> shift) + std::string(name);
    }
  }
  return std::to_string(bytes) + "B";
}

std::string accepted_values(const option_rule& r) {
  std::string text;
  switch (r.kind) {
    case value_kind::bytes:
      text = bytes_range(r);
      break;
    case value_kind::count:
      text = count_range(r);
      break;
    case value_kind::number:
      text = "a number in " + std::string(r.low_open ? "(" : "[") + number_text(r.low) + ", " +
             number_text(r.high) + "]";
      break;
    case value_kind::flag:
      return "true or false";
    case value_kind::text:
      return r.unit.empty() ? "a text without commas" : std::string(r.unit);
  }
  if (!r.unit.empty() && r.kind != value_kind::count) text += " (" + std::string(r.unit) + ")";
  return r.none_word.empty() ? text : text + " or '" + std::string(r.none_word) + "'";
}

status set_option(const option_rule& r, std::string_view value, option_field field) {
  switch (r.kind) {
    case value_kind::bytes:
    case value_kind::count: {
      std::uint64_t& out = *std::get<std::uint64_t*>(field);
      if (!r.none_word.empty() && value == r.none_word) {
        out = r.none_value;
        return {};
      }
      auto v =
          r.kind == value_kind::bytes ? parse_byte_size(r.name, value) : parse_count(r.name, value);
      if (!v) return bad(r, value);
      // The sentinel is reachable only through the word `none`.
      if (!r.none_word.empty() && *v == r.none_value) return bad(r, value);
      std::uint64_t parsed = *v;
      if (auto s = check_value(r, &parsed, value); !s) return s;
      out = parsed;
      return {};
    }
    case value_kind::number: {
      auto v = parse_number(r.name, value);
      if (!v) return bad(r, value);
      double parsed = *v;
      // NOLINTNEXTLINE(clang-analyzer-cplusplus.NewDeleteLeaks): false positive on status
      if (auto s = check_value(r, &parsed, value); !s) return s;
      *std::get<double*>(field) = parsed;
      return {};
    }
    case value_kind::flag:
      if (value != "true" && value != "false") return bad(r, value);
      *std::get<bool*>(field) = value == "true";
      return {};
    case value_kind::text:
      if (value.empty()) return bad(r, value);
      if (const auto* c = std::get_if<option_converter>(&field)) {
        return c->set(c->target, value) ? status{} : bad(r, value);
      }
      *std::get<std::string*>(field) = std::string(value);
      return {};
  }
  return bad(r, value);
}

std::string option_text(const option_rule& r, option_field field) {
  switch (r.kind) {
    case value_kind::bytes:
    case value_kind::count: {
      const std::uint64_t v = *std::get<std::uint64_t*>(field);
      if (!r.none_word.empty() && v == r.none_value) return std::string(r.none_word);
      return r.kind == value_kind::bytes ? format_byte_option(v) : std::to_string(v);
    }
    case value_kind::number:
      return number_text(*std::get<double*>(field));
    case value_kind::flag:
      return *std::get<bool*>(field) ? "true" : "false";
    case value_kind::text: {
      if (const auto* c = std::get_if<option_converter>(&field)) return c->text(c->target);
      const std::string& s = *std::get<std::string*>(field);
      return s.empty() ? "none" : s;
    }
  }
  return {};
}

status check_option(const option_rule& r, option_field field) {
  // NOLINTNEXTLINE(clang-analyzer-cplusplus.NewDeleteLeaks): false positive on status
  return check_value(r, field, option_text(r, field));
}

std::string options_markdown_row(const option_rule& r, option_field default_value) {
  const std::string def = option_text(r, default_value);
  const bool word = r.kind == value_kind::text ? def == "none" : def == r.none_word;
  return "| `" + std::string(r.name) + "` | " + (word ? def : "`" + def + "`") + " | " +
         accepted_values(r) + " | " + std::string(r.doc) + " |\n";
}

}  // namespace strata
