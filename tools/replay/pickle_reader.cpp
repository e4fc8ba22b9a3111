#include "pickle_reader.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace strata::replay {

namespace {

const pickle_list empty_list;

// Names of opcodes we refuse, for the error message.
const char* opcode_name(unsigned char op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 0x81:
      return "NEWOBJ";
    case 'b':
      return "BUILD";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x8f:
      return "EMPTY_SET";
    default:
      return "unknown";
  }
}

class parser {
 public:
  explicit parser(std::string_view b) : b_(b) {}

  result<pickle_value> run() {
    while (pos_ < b_.size()) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(b_[pos_++]);
      if (op == '.') {
        if (stack_.size() != 1)
          return error(at, "STOP with a stack of " + std::to_string(stack_.size()));
        return stack_.back();
      }
      if (auto s = step(op, at); !s) return s;
    }
    return error(pos_, "truncated pickle: no STOP opcode");
  }

 private:
  static status error(std::size_t at, const std::string& what) {
    return {errc::invalid_argument, "offset " + std::to_string(at) + ": " + what};
  }
  bool need(std::size_t n) const { return b_.size() - pos_ >= n; }
  std::uint64_t le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    return v;
  }
  void push(pickle_value v) { stack_.push_back(std::move(v)); }
  status push_string(std::size_t at, std::size_t len_bytes) {
    if (!need(len_bytes)) return error(at, "truncated string length");
    const std::uint64_t n = le(len_bytes);
    if (!need(n)) return error(at, "truncated string");
    push(pickle_value(std::make_shared<const std::string>(b_.substr(pos_, n))));
    pos_ += n;
    return {};
  }
  result<std::size_t> pop_mark(std::size_t at) {
    if (marks_.empty()) return error(at, "no MARK before this opcode");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  status pop_into_list(std::size_t at, std::size_t from) {
    if (from == 0 || !stack_[from - 1].is_list()) return error(at, "APPENDS without a list");
    auto& list = *std::get<std::shared_ptr<pickle_list>>(stack_[from - 1].raw());
    for (std::size_t i = from; i < stack_.size(); ++i) list.push_back(std::move(stack_[i]));
    stack_.resize(from);
    return {};
  }
  status pop_into_dict(std::size_t at, std::size_t from) {
    if (from == 0 || !stack_[from - 1].is_dict() || (stack_.size() - from) % 2 != 0) {
      return error(at, "SETITEMS without a dict or with an odd item count");
    }
    auto& dict = *std::get<std::shared_ptr<pickle_dict>>(stack_[from - 1].raw());
    for (std::size_t i = from; i < stack_.size(); i += 2) {
      // As in Python, a repeated key replaces the earlier value.
      auto same = std::find_if(dict.begin(), dict.end(), [&](const auto& kv) {
        return stack_[i].is_string() && kv.first.is_string() &&
               kv.first.as_string() == stack_[i].as_string();
      });
      if (same != dict.end()) {
        same->second = std::move(stack_[i + 1]);
      } else {
        dict.emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
      }
    }
    stack_.resize(from);
    return {};
  }
  status make_tuple(std::size_t from) {
    auto items = std::make_shared<pickle_list>();
    for (std::size_t i = from; i < stack_.size(); ++i) items->push_back(std::move(stack_[i]));
    stack_.resize(from);
    push(pickle_value(std::move(items), true));
    return {};
  }

  status step(unsigned char op,
              std::size_t at) {  // NOLINT(readability-function-cognitive-complexity)
    switch (op) {
      case 0x80:  // PROTO
        if (!need(1)) return error(at, "truncated PROTO");
        if (auto v = le(1); v < 2 || v > 5) {
          return error(at, "pickle protocol " + std::to_string(v) + " (2 to 5 are read)");
        }
        return {};
      case 0x95:  // FRAME: a length we do not need
        if (!need(8)) return error(at, "truncated FRAME");
        pos_ += 8;
        return {};
      case '}':
        push(pickle_value(std::make_shared<pickle_dict>()));
        return {};
      case ']':
        push(pickle_value(std::make_shared<pickle_list>()));
        return {};
      case ')':
        push(pickle_value(std::make_shared<pickle_list>(), true));
        return {};
      case '(':
        marks_.push_back(stack_.size());
        return {};
      case 'N':
        push(pickle_value());
        return {};
      case 0x88:
        push(pickle_value(true));
        return {};
      case 0x89:
        push(pickle_value(false));
        return {};
      case 'J':
        if (!need(4)) return error(at, "truncated BININT");
        push(pickle_value(static_cast<std::int64_t>(static_cast<std::int32_t>(le(4)))));
        return {};
      case 'K':
        if (!need(1)) return error(at, "truncated BININT1");
        push(pickle_value(static_cast<std::int64_t>(le(1))));
        return {};
      case 'M':
        if (!need(2)) return error(at, "truncated BININT2");
        push(pickle_value(static_cast<std::int64_t>(le(2))));
        return {};
      case 0x8a: {  // LONG1
        if (!need(1)) return error(at, "truncated LONG1");
        const auto n = static_cast<std::size_t>(le(1));
        if (!need(n)) return error(at, "truncated LONG1");
        if (n > 8 && !(n == 9 && b_[pos_ + 8] == 0)) return error(at, "integer wider than 64 bits");
        std::uint64_t v = n == 0 ? 0 : le(std::min<std::size_t>(n, 8));
        if (n == 9) ++pos_;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign
        push(pickle_value(static_cast<std::int64_t>(v)));
        return {};
      }
      case 'G': {
        if (!need(8)) return error(at, "truncated BINFLOAT");
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<unsigned char>(b_[pos_++]);
        push(pickle_value(std::bit_cast<double>(bits)));
        return {};
      }
      case 'X':
        return push_string(at, 4);
      case 0x8c:
        return push_string(at, 1);
      case 0x8d:
        return push_string(at, 8);
      case 0x94:  // MEMOIZE
        if (stack_.empty()) return error(at, "MEMOIZE on an empty stack");
        memo_[memo_.size()] = stack_.back();
        return {};
      case 'q':
      case 'r': {  // BINPUT, LONG_BINPUT
        const std::size_t n = op == 'q' ? 1 : 4;
        if (!need(n) || stack_.empty()) return error(at, "bad BINPUT");
        memo_[le(n)] = stack_.back();
        return {};
      }
      case 'h':
      case 'j': {  // BINGET, LONG_BINGET
        const std::size_t n = op == 'h' ? 1 : 4;
        if (!need(n)) return error(at, "truncated BINGET");
        auto it = memo_.find(le(n));
        if (it == memo_.end()) return error(at, "BINGET of an unknown memo entry");
        push(it->second);
        return {};
      }
      case 'a':  // APPEND
        if (stack_.size() < 2) return error(at, "APPEND without a list");
        return pop_into_list(at, stack_.size() - 1);
      case 'e': {
        auto m = pop_mark(at);
        if (!m) return m.error();
        return pop_into_list(at, *m);
      }
      case 's':  // SETITEM
        if (stack_.size() < 3) return error(at, "SETITEM without a dict");
        return pop_into_dict(at, stack_.size() - 2);
      case 'u': {
        auto m = pop_mark(at);
        if (!m) return m.error();
        return pop_into_dict(at, *m);
      }
      case 't': {
        auto m = pop_mark(at);
        if (!m) return m.error();
        return make_tuple(*m);
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const std::size_t n = op - 0x84U;
        if (stack_.size() < n) return error(at, "TUPLE with too few items");
        return make_tuple(stack_.size() - n);
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        const char c = op >= 0x20 && op < 0x7f ? static_cast<char>(op) : '?';
        return error(at, std::string("unsupported pickle opcode ") + hex + " ('" + c + "', " +
                             opcode_name(op) + ")");
      }
    }
  }

  std::string_view b_;
  std::size_t pos_ = 0;
  std::vector<pickle_value> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, pickle_value> memo_;
};

}  // namespace

std::int64_t pickle_value::as_int() const {
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return *i;
  if (const auto* b = std::get_if<bool>(&v_)) return *b ? 1 : 0;
  if (const auto* d = std::get_if<double>(&v_)) return static_cast<std::int64_t>(*d);
  return 0;
}

std::string_view pickle_value::as_string() const {
  if (const auto* s = std::get_if<std::shared_ptr<const std::string>>(&v_)) return **s;
  return {};
}

const pickle_list& pickle_value::items() const {
  if (const auto* l = std::get_if<std::shared_ptr<pickle_list>>(&v_)) return **l;
  return empty_list;
}

const pickle_value* pickle_value::get(std::string_view key) const {
  const auto* d = std::get_if<std::shared_ptr<pickle_dict>>(&v_);
  if (d == nullptr) return nullptr;
  for (const auto& [k, v] : **d) {
    if (k.as_string() == key) return &v;
  }
  return nullptr;
}

result<pickle_value> read_pickle(std::string_view bytes) {
  return parser(bytes).run();
}

}  // namespace strata::replay
