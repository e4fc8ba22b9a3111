#include "pickle_reader.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <unordered_map>

#include "pickle_opcodes.hpp"

namespace strata::replay {

namespace {

const pickle_list empty_list;

// The parser keeps Python's model: a stack of values and a stack of marks
// (indices into it). An opcode sees only the values above the last mark.
//
// Invariants, checked as values are put inside containers:
//   - a container, once inside another, is never changed again (sealed), so
//     no cycle can form (a container holds only sealed containers, and only
//     an unsealed one can be changed; putting one inside itself is refused);
//   - depth(c) = 1 + the deepest child, at most max_pickle_depth, and final
//     once c is sealed (its children no longer change).
class parser {
 public:
  explicit parser(std::string_view b) : b_(b) {}

  result<pickle_value> run() {
    while (pos_ < b_.size()) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(b_[pos_++]);
      if (op == '.') {
        if (stack_.size() != 1 || !marks_.empty()) {
          return error(at, "STOP with a stack of " + std::to_string(stack_.size()) +
                               " values and " + std::to_string(marks_.size()) + " marks");
        }
        return stack_.back();
      }
      if (auto s = step(op, at); !s) return s;
    }
    return error(pos_, "truncated pickle: no STOP opcode");
  }

 private:
  struct node {
    std::size_t depth = 1;
    bool sealed = false;
  };

  static status error(std::size_t at, const std::string& what) {
    return {errc::invalid_argument, "offset " + std::to_string(at) + ": " + what};
  }
  [[nodiscard]] bool need(std::size_t n) const { return b_.size() - pos_ >= n; }
  // Values above the last mark.
  [[nodiscard]] std::size_t avail() const {
    return stack_.size() - (marks_.empty() ? 0 : marks_.back());
  }
  std::uint64_t le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    return v;
  }
  status push(std::size_t at, pickle_value v) {
    if (++values_ > max_pickle_values) {
      return error(at, "more than " + std::to_string(max_pickle_values) + " values");
    }
    stack_.push_back(std::move(v));
    return {};
  }
  // Pushes a container made by this opcode. Its address may be that of a
  // container dropped earlier (POP), so its record starts afresh.
  status push_new(std::size_t at, pickle_value v) {
    nodes_[v.container()] = node{};
    return push(at, std::move(v));
  }
  status push_string(std::size_t at, std::size_t len_bytes) {
    if (!need(len_bytes)) return error(at, "truncated string length");
    const std::uint64_t n = le(len_bytes);
    if (!need(n)) return error(at, "truncated string");
    auto s = std::make_shared<const std::string>(b_.substr(pos_, n));
    pos_ += n;
    return push(at, pickle_value(std::move(s)));
  }
  // LONG1 / LONG4: little-endian two's complement of n bytes.
  status push_long(std::size_t at, std::size_t len_bytes) {
    if (!need(len_bytes)) return error(at, "truncated LONG length");
    const std::uint64_t n = le(len_bytes);
    if (!need(n)) return error(at, "truncated LONG");
    if (n > 8 && !(n == 9 && b_[pos_ + 8] == 0)) return error(at, "integer wider than 64 bits");
    std::uint64_t v = n == 0 ? 0 : le(std::min<std::size_t>(n, 8));
    if (n == 9) ++pos_;
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign
    return push(at, pickle_value(static_cast<std::int64_t>(v)));
  }
  result<std::size_t> pop_mark(std::size_t at) {
    if (marks_.empty()) return error(at, "no MARK before this opcode");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  // Puts `child` inside the container `parent` (checks the invariants).
  status adopt(std::size_t at, const void* parent, const pickle_value& child) {
    node& p = nodes_[parent];
    if (p.sealed) {
      return error(at,
                   "a list or dict changed after it was put inside another "
                   "(a recursive structure; memory snapshots have none)");
    }
    const void* c = child.container();
    if (c == nullptr) return {};
    if (c == parent) return error(at, "a list or dict that contains itself");
    node& n = nodes_[c];
    n.sealed = true;
    p.depth = std::max(p.depth, n.depth + 1);
    if (p.depth > max_pickle_depth) {
      return error(at, "values nested deeper than " + std::to_string(max_pickle_depth) + " levels");
    }
    return {};
  }

  // Moves stack_[from..] into the list below them (APPEND, APPENDS).
  status pop_into_list(std::size_t at, std::size_t from, std::size_t floor) {
    if (from <= floor || !stack_[from - 1].is_list() || stack_[from - 1].is_tuple()) {
      return error(at, "APPEND without a list");
    }
    const pickle_value& target = stack_[from - 1];
    auto& list = *std::get<std::shared_ptr<pickle_list>>(target.raw());
    for (std::size_t i = from; i < stack_.size(); ++i) {
      if (auto s = adopt(at, target.container(), stack_[i]); !s) return s;
      list.push_back(std::move(stack_[i]));
    }
    stack_.resize(from);
    return {};
  }
  // Moves key/value pairs stack_[from..] into the dict below them. A key
  // given twice is appended again: get() reads the last one, as Python does.
  status pop_into_dict(std::size_t at, std::size_t from, std::size_t floor) {
    if (from <= floor || !stack_[from - 1].is_dict() || (stack_.size() - from) % 2 != 0) {
      return error(at, "SETITEMS without a dict or with an odd item count");
    }
    const pickle_value& target = stack_[from - 1];
    auto& dict = *std::get<std::shared_ptr<pickle_dict>>(target.raw());
    for (std::size_t i = from; i < stack_.size(); i += 2) {
      if (auto s = adopt(at, target.container(), stack_[i]); !s) return s;
      if (auto s = adopt(at, target.container(), stack_[i + 1]); !s) return s;
      dict.emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
    }
    stack_.resize(from);
    return {};
  }
  // Replaces stack_[from..] by one new list, tuple or dict holding them.
  status collect(std::size_t at, std::size_t from, char kind) {
    pickle_value made;
    if (kind == 'd') {
      if ((stack_.size() - from) % 2 != 0) return error(at, "DICT with an odd item count");
      made = pickle_value(std::make_shared<pickle_dict>());
    } else {
      made = pickle_value(std::make_shared<pickle_list>(), kind == 't');
    }
    nodes_[made.container()] = node{};
    for (std::size_t i = from; i < stack_.size(); ++i) {
      if (auto s = adopt(at, made.container(), stack_[i]); !s) return s;
    }
    if (kind == 'd') {
      auto& dict = *std::get<std::shared_ptr<pickle_dict>>(made.raw());
      for (std::size_t i = from; i < stack_.size(); i += 2) {
        dict.emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
      }
    } else {
      auto& list = *std::get<std::shared_ptr<pickle_list>>(made.raw());
      for (std::size_t i = from; i < stack_.size(); ++i) list.push_back(std::move(stack_[i]));
    }
    stack_.resize(from);
    return push(at, std::move(made));
  }
  status memo_put(std::size_t at, std::uint64_t key) {
    if (avail() == 0) return error(at, "memo store on an empty stack");
    memo_[key] = stack_.back();
    return {};
  }
  status pop(std::size_t at) {
    if (avail() > 0) {
      stack_.pop_back();
      return {};
    }
    if (marks_.empty()) return error(at, "POP on an empty stack");
    marks_.pop_back();  // as Python: POP of an empty frame drops its mark
    return {};
  }

  status step(unsigned char op,
              std::size_t at) {  // NOLINT(readability-function-cognitive-complexity)
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
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
        return push_new(at, pickle_value(std::make_shared<pickle_dict>()));
      case ']':
        return push_new(at, pickle_value(std::make_shared<pickle_list>()));
      case ')':
        return push_new(at, pickle_value(std::make_shared<pickle_list>(), true));
      case '(':
        marks_.push_back(stack_.size());
        return {};
      case '0':
        return pop(at);
      case '1': {  // POP_MARK
        auto m = pop_mark(at);
        if (!m) return m.error();
        stack_.resize(*m);
        return {};
      }
      case '2':  // DUP
        if (avail() == 0) return error(at, "DUP on an empty stack");
        return push(at, stack_.back());
      case 'N':
        return push(at, pickle_value());
      case 0x88:
        return push(at, pickle_value(true));
      case 0x89:
        return push(at, pickle_value(false));
      case 'J':
        if (!need(4)) return error(at, "truncated BININT");
        return push(at, pickle_value(static_cast<std::int64_t>(static_cast<std::int32_t>(le(4)))));
      case 'K':
        if (!need(1)) return error(at, "truncated BININT1");
        return push(at, pickle_value(static_cast<std::int64_t>(le(1))));
      case 'M':
        if (!need(2)) return error(at, "truncated BININT2");
        return push(at, pickle_value(static_cast<std::int64_t>(le(2))));
      case 0x8a:
        return push_long(at, 1);
      case 0x8b:
        return push_long(at, 4);
      case 'G': {
        if (!need(8)) return error(at, "truncated BINFLOAT");
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<unsigned char>(b_[pos_++]);
        return push(at, pickle_value(std::bit_cast<double>(bits)));
      }
      case 'X':
        return push_string(at, 4);
      case 0x8c:
        return push_string(at, 1);
      case 0x8d:
        return push_string(at, 8);
      case 0x94:  // MEMOIZE
        return memo_put(at, memo_.size());
      case 'q':
      case 'r': {  // BINPUT, LONG_BINPUT
        const std::size_t n = op == 'q' ? 1 : 4;
        if (!need(n)) return error(at, "truncated BINPUT");
        return memo_put(at, le(n));
      }
      case 'h':
      case 'j': {  // BINGET, LONG_BINGET
        const std::size_t n = op == 'h' ? 1 : 4;
        if (!need(n)) return error(at, "truncated BINGET");
        auto it = memo_.find(le(n));
        if (it == memo_.end()) return error(at, "BINGET of an unknown memo entry");
        return push(at, it->second);
      }
      case 'a':  // APPEND
        if (avail() < 2) return error(at, "APPEND without a list");
        return pop_into_list(at, stack_.size() - 1, floor);
      case 'e': {  // APPENDS
        auto m = pop_mark(at);
        if (!m) return m.error();
        return pop_into_list(at, *m, marks_.empty() ? 0 : marks_.back());
      }
      case 's':  // SETITEM
        if (avail() < 3) return error(at, "SETITEM without a dict");
        return pop_into_dict(at, stack_.size() - 2, floor);
      case 'u': {  // SETITEMS
        auto m = pop_mark(at);
        if (!m) return m.error();
        return pop_into_dict(at, *m, marks_.empty() ? 0 : marks_.back());
      }
      case 't':
      case 'l':
      case 'd': {  // TUPLE, LIST, DICT
        auto m = pop_mark(at);
        if (!m) return m.error();
        return collect(at, *m, static_cast<char>(op));
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const std::size_t n = op - 0x84U;
        if (avail() < n) return error(at, "TUPLE with too few items");
        return collect(at, stack_.size() - n, 't');
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return error(at, std::string("unsupported pickle opcode ") + hex + " (" +
                             pickle_opcode_name(op) +
                             "): memory snapshots hold only dicts, lists, tuples, strings, "
                             "numbers, bools and None");
      }
    }
  }

  std::string_view b_;
  std::size_t pos_ = 0;
  std::size_t values_ = 0;
  std::vector<pickle_value> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, pickle_value> memo_;
  std::unordered_map<const void*, node> nodes_;
};

}  // namespace

std::int64_t pickle_value::as_int() const {
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return *i;
  if (const auto* b = std::get_if<bool>(&v_)) return *b ? 1 : 0;
  return 0;
}

double pickle_value::as_float() const {
  if (const auto* d = std::get_if<double>(&v_)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return static_cast<double>(*i);
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

const void* pickle_value::container() const noexcept {
  if (const auto* l = std::get_if<std::shared_ptr<pickle_list>>(&v_)) return l->get();
  if (const auto* d = std::get_if<std::shared_ptr<pickle_dict>>(&v_)) return d->get();
  return nullptr;
}

const pickle_value* pickle_value::get(std::string_view key) const {
  const auto* d = std::get_if<std::shared_ptr<pickle_dict>>(&v_);
  if (d == nullptr) return nullptr;
  // Newest first. (std::views::reverse is not usable: clang 14 builds the
  // fuzz targets against libstdc++ 12, whose ranges it rejects.)
  for (auto it = (*d)->rbegin(); it != (*d)->rend(); ++it) {  // NOLINT(modernize-loop-convert)
    if (it->first.is_string() && it->first.as_string() == key) return &it->second;
  }
  return nullptr;
}

result<pickle_value> read_pickle(std::string_view bytes) {
  return parser(bytes).run();
}

}  // namespace strata::replay
