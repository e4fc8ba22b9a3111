// A reader for the subset of Python pickles that PyTorch memory snapshots
// use: dicts, lists, tuples, strings, ints (up to 64 bits), floats, bools
// and None, in protocols 2 to 5 (with FRAME, the memo, MARK-based and
// stack opcodes). Anything else (classes, bytes, sets, persistent ids,
// protocol 0's text opcodes) is an error naming the opcode and its offset.
//
// Limits, each an error naming the offset, so no input can crash, hang or
// exhaust the reader: nesting at most `max_pickle_depth` levels (the value
// destructor recurses that deep, no deeper); at most `max_pickle_values`
// values; no recursive structures (a list or dict is never changed after it
// was put inside another, which is exactly what a pickle of a cycle does;
// real snapshots have none).
//
// Values share their payloads: a memoized string or list referenced a
// thousand times (PyTorch's stack frames) is stored once.
//
// Thread safety: values are immutable after reading and may be read from
// any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "strata/error.hpp"

namespace strata::replay {

class pickle_value;
using pickle_list = std::vector<pickle_value>;
using pickle_dict = std::vector<std::pair<pickle_value, pickle_value>>;

class pickle_value {
 public:
  using storage =
      std::variant<std::monostate, bool, std::int64_t, double, std::shared_ptr<const std::string>,
                   std::shared_ptr<pickle_list>, std::shared_ptr<pickle_dict>>;
  pickle_value() = default;
  explicit pickle_value(storage v, bool tuple = false) : v_(std::move(v)), tuple_(tuple) {}

  [[nodiscard]] bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  [[nodiscard]] bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  [[nodiscard]] bool is_float() const { return std::holds_alternative<double>(v_); }
  [[nodiscard]] bool is_string() const {
    return std::holds_alternative<std::shared_ptr<const std::string>>(v_);
  }
  [[nodiscard]] bool is_list() const {
    return std::holds_alternative<std::shared_ptr<pickle_list>>(v_);
  }
  [[nodiscard]] bool is_dict() const {
    return std::holds_alternative<std::shared_ptr<pickle_dict>>(v_);
  }
  [[nodiscard]] bool is_tuple() const { return tuple_; }

  /// The int (a bool reads as 0/1); 0 otherwise (floats included: check
  /// is_int() where the type matters).
  [[nodiscard]] std::int64_t as_int() const;
  /// The float, or the int converted; 0 otherwise.
  [[nodiscard]] double as_float() const;
  /// The string; empty otherwise.
  [[nodiscard]] std::string_view as_string() const;
  /// The list's or tuple's items; empty otherwise.
  [[nodiscard]] const pickle_list& items() const;
  /// The dict's value for string key `key`, or null if absent / not a dict.
  /// A key given twice reads as its last value, as in Python.
  [[nodiscard]] const pickle_value* get(std::string_view key) const;

  [[nodiscard]] const storage& raw() const noexcept { return v_; }
  /// The shared payload of a list, tuple or dict (its identity); null for
  /// every other value.
  [[nodiscard]] const void* container() const noexcept;

 private:
  storage v_;
  bool tuple_ = false;
};

inline constexpr std::size_t max_pickle_depth = 200;
inline constexpr std::size_t max_pickle_values = std::size_t{1} << 26;

/// Parses a whole pickle. Errors (invalid_argument) name the offset and
/// the opcode: "offset 1234: unsupported pickle opcode 0x63 ('c', GLOBAL)".
result<pickle_value> read_pickle(std::string_view bytes);

}  // namespace strata::replay
