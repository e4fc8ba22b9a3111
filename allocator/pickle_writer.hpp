// A writer of Python pickles (protocol 2) for the value kinds PyTorch's
// memory snapshots use: dicts, lists, tuples, strings, ints, floats, bools
// and None. Containers are written as a begin, their items, and an end, so a
// snapshot streams out without building a tree first.
//
// Usage: begin_dict(); key("segments"); begin_list(); ... end_list();
// end_dict(); then finish() returns the bytes. Nesting is checked only by
// the caller's structure (a mismatched end gives a pickle Python rejects).
//
// Thread safety: none (one writer per thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

class pickle_writer {
 public:
  pickle_writer();

  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  /// A tuple of the values written until end_tuple().
  void begin_tuple();
  void end_tuple();

  void str(std::string_view s);
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  void real(double v);
  void boolean(bool v);
  void none();
  /// A dict key (a string); the value follows.
  void key(std::string_view k) { str(k); }
  /// A key and its value in one call.
  void field(std::string_view k, std::string_view v) {
    key(k);
    str(v);
  }
  void field_uint(std::string_view k, std::uint64_t v) {
    key(k);
    unsigned_integer(v);
  }
  /// A key whose value is an empty list (PyTorch's "frames": []).
  void field_empty_list(std::string_view k) {
    key(k);
    begin_list();
    end_list();
  }

  /// Appends STOP and returns the pickle.
  std::string finish() &&;

 private:
  void op(char c) { out_.push_back(c); }
  void raw(std::uint64_t v, int bytes);  // little-endian
  std::string out_;
};

}  // namespace strata
