// Parsing of "key=value,key=value" option text and of the values in it
// (byte sizes such as "80GiB", counts, rates). Shared by device specs and,
// above this layer, by STRATA_CONF.
//
// Thread safety: pure functions; may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/error.hpp"

namespace strata {

struct option {
  std::string_view key;
  std::string_view value;
};

/// Splits `text` at ',' into `key<separator>value` pairs (whitespace around
/// keys and values is trimmed). An empty text gives no options. An item
/// without the separator, with an empty key or value, or a key given twice is
/// an invalid_argument error naming the item and `context`.
result<std::vector<option>> parse_option_list(std::string_view text, char separator,
                                              std::string_view context);

/// Parses a byte count: digits with an optional unit B, KiB, MiB, GiB, TiB
/// (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. "80GiB",
/// "4096", "1.5GiB". Fractions must give a whole number of bytes. Overflow,
/// negative numbers and unknown units are invalid_argument errors naming `key`.
result<std::uint64_t> parse_byte_size(std::string_view key, std::string_view text);

/// Parses a non-negative decimal integer (no unit).
result<std::uint64_t> parse_count(std::string_view key, std::string_view text);

/// Parses a finite, non-negative decimal number.
result<double> parse_rate(std::string_view key, std::string_view text);

/// Formats a byte count for people: "80 GiB", "1.5 MiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace strata
