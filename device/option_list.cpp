#include "strata/option_table.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace strata {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

status bad_value(std::string_view key, std::string_view text, std::string_view expected) {
  return {errc::invalid_argument, "bad value '" + std::string(text) + "' for '" + std::string(key) +
                                      "': expected " + std::string(expected)};
}

struct unit {
  std::string_view suffix;
  std::uint64_t scale;
};

constexpr std::array<unit, 9> units{{{"KiB", 1ULL << 10},
                                     {"MiB", 1ULL << 20},
                                     {"GiB", 1ULL << 30},
                                     {"TiB", 1ULL << 40},
                                     {"KB", 1000ULL},
                                     {"MB", 1000ULL * 1000},
                                     {"GB", 1000ULL * 1000 * 1000},
                                     {"TB", 1000ULL * 1000 * 1000 * 1000},
                                     {"B", 1}}};

// Parses a non-negative decimal number: digits with an optional fraction
// and, in `format` general, an exponent.
bool parse_decimal(std::string_view text, double& out, std::chars_format format) {
  if (text.empty() || text.front() == '-' || text.front() == '+') return false;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out, format);
  return ec == std::errc() && ptr == end && std::isfinite(out);
}

// Appends `item` (its separator at `sep`) unless its key or value is empty
// or its key was given before.
status add_item(std::vector<option>& options, std::string_view item, std::size_t sep,
                std::string_view context) {
  const option opt{trim(item.substr(0, sep)), trim(item.substr(sep + 1))};
  if (opt.key.empty() || opt.value.empty()) {
    return {errc::invalid_argument,
            std::string(context) + ": '" + std::string(item) + "' has an empty key or value"};
  }
  for (const auto& seen : options) {
    if (seen.key == opt.key) {
      return {errc::invalid_argument,
              std::string(context) + ": key '" + std::string(opt.key) + "' given twice"};
    }
  }
  options.push_back(opt);
  return {};
}

}  // namespace

result<std::vector<option>> parse_option_list(std::string_view text, char separator,
                                              std::string_view context,
                                              std::string_view nested_key) {
  std::vector<option> options;
  text = trim(text);
  if (text.empty()) return options;
  while (true) {
    const auto comma = text.find(',');
    const auto item = trim(text.substr(0, comma));
    if (item.empty()) {
      return status{errc::invalid_argument,
                    std::string(context) + ": empty item (a leading, trailing or doubled comma)"};
    }
    const auto sep = item.find(separator);
    const auto equals = item.find('=');
    if (!nested_key.empty() && separator != '=' && equals < sep) {
      if (options.empty() || options.back().key != nested_key) {
        return status{errc::invalid_argument, std::string(context) + ": '" + std::string(item) +
                                                  "' is not of the form key" + separator +
                                                  "value (key=value items belong to a " +
                                                  std::string(nested_key) + " spec)"};
      }
      // The views are into `text`: the value now runs to this item's end.
      std::string_view& value = options.back().value;
      value = {value.data(), static_cast<std::size_t>(item.data() + item.size() - value.data())};
    } else if (sep == std::string_view::npos) {
      return status{errc::invalid_argument, std::string(context) + ": '" + std::string(item) +
                                                "' is not of the form key" + separator + "value"};
    } else {
      if (auto s = add_item(options, item, sep, context); !s) return s;
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return options;
}

result<std::uint64_t> parse_byte_size(std::string_view key, std::string_view text) {
  constexpr std::string_view expected =
      "a byte size such as 4096, 512KiB, 2MiB, 80GiB (units B, KiB, MiB, GiB, TiB, KB, MB, GB, "
      "TB)";
  std::string_view number = trim(text);
  std::uint64_t scale = 1;
  for (const auto& u : units) {
    if (number.size() > u.suffix.size() && number.ends_with(u.suffix)) {
      number = trim(number.substr(0, number.size() - u.suffix.size()));
      scale = u.scale;
      break;
    }
  }
  std::uint64_t whole = 0;
  const auto* end = number.data() + number.size();
  auto [ptr, ec] = std::from_chars(number.data(), end, whole);
  if (ec == std::errc() && ptr == end) {
    if (whole > std::numeric_limits<std::uint64_t>::max() / scale) {
      return bad_value(key, text, "a size below 2^64 bytes");
    }
    return whole * scale;
  }
  double value = 0;
  if (!parse_decimal(number, value, std::chars_format::fixed))
    return bad_value(key, text, expected);
  const double bytes = value * static_cast<double>(scale);
  if (bytes >= 18446744073709551616.0) return bad_value(key, text, "a size below 2^64 bytes");
  if (bytes != std::floor(bytes)) return bad_value(key, text, "a whole number of bytes");
  return static_cast<std::uint64_t>(bytes);
}

result<std::uint64_t> parse_count(std::string_view key, std::string_view text) {
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return bad_value(key, text, "a non-negative integer");
  }
  return value;
}

result<double> parse_number(std::string_view key, std::string_view text) {
  double value = 0;
  if (!parse_decimal(text, value, std::chars_format::general)) {
    return bad_value(key, text, "a finite non-negative number such as 0.5 or 1e3");
  }
  return value;
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t i = 0;
  auto value = static_cast<double>(bytes);
  while (value >= 1024.0 && i + 1 < names.size()) {
    value /= 1024.0;
    ++i;
  }
  std::array<char, 32> buf{};
  if (i == 0 || value == std::floor(value)) {
    std::snprintf(buf.data(), buf.size(), "%.0f %s", value, names[i].data());
  } else {
    std::snprintf(buf.data(), buf.size(), "%.2f %s", value, names[i].data());
  }
  return buf.data();
}

}  // namespace strata
