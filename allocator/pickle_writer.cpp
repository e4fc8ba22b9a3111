#include "pickle_writer.hpp"

#include <bit>
#include <cstring>

namespace strata {

namespace {

// Opcodes of pickle protocol 2 (Python's Lib/pickle.py).
constexpr char proto = '\x80';
constexpr char mark = '(';
constexpr char stop = '.';
constexpr char empty_dict = '}';
constexpr char setitems = 'u';
constexpr char empty_list = ']';
constexpr char appends = 'e';
constexpr char tuple = 't';
constexpr char binunicode = 'X';
constexpr char binint = 'J';
constexpr char long1 = '\x8a';
constexpr char binfloat = 'G';
constexpr char newtrue = '\x88';
constexpr char newfalse = '\x89';
constexpr char none_op = 'N';

}  // namespace

pickle_writer::pickle_writer() {
  op(proto);
  op('\x02');
}

void pickle_writer::raw(std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void pickle_writer::begin_dict() {
  op(empty_dict);
  op(mark);
}

void pickle_writer::end_dict() {
  op(setitems);
}

void pickle_writer::begin_list() {
  op(empty_list);
  op(mark);
}

void pickle_writer::end_list() {
  op(appends);
}

void pickle_writer::begin_tuple() {
  op(mark);
}

void pickle_writer::end_tuple() {
  op(tuple);
}

void pickle_writer::str(std::string_view s) {
  op(binunicode);
  raw(s.size(), 4);
  out_.append(s);
}

void pickle_writer::integer(std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    op(binint);
    raw(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    return;
  }
  // LONG1: little-endian two's complement, 8 bytes always suffice.
  op(long1);
  out_.push_back('\x08');
  raw(static_cast<std::uint64_t>(v), 8);
}

void pickle_writer::unsigned_integer(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
    integer(static_cast<std::int64_t>(v));
    return;
  }
  op(long1);  // nine bytes keep the sign bit clear
  out_.push_back('\x09');
  raw(v, 8);
  out_.push_back('\0');
}

void pickle_writer::real(double v) {
  op(binfloat);
  const auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void pickle_writer::boolean(bool v) {
  op(v ? newtrue : newfalse);
}

void pickle_writer::none() {
  op(none_op);
}

std::string pickle_writer::finish() && {
  op(stop);
  return std::move(out_);
}

}  // namespace strata
