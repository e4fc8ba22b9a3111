// The pickle reader: what PyTorch snapshots use, round trips through
// Strata's writer, and clear errors for everything else.
#include <gtest/gtest.h>

#include <string>

#include "pickle_writer.hpp"
#include "replay/pickle_reader.hpp"

namespace strata::replay {
namespace {

TEST(PickleReader, RoundTripsTheWritersValues) {
  pickle_writer w;
  w.begin_dict();
  w.key("n");
  w.integer(-5);
  w.key("big");
  w.unsigned_integer(std::uint64_t{1} << 40);
  w.key("x");
  w.real(2.5);
  w.key("list");
  w.begin_list();
  w.str("a");
  w.boolean(true);
  w.none();
  w.end_list();
  w.key("pair");
  w.begin_tuple();
  w.integer(0);
  w.integer(7);
  w.end_tuple();
  w.end_dict();
  auto v = read_pickle(std::move(w).finish());
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(v->get("n")->as_int(), -5);
  EXPECT_EQ(v->get("big")->as_int(), std::int64_t{1} << 40);
  EXPECT_TRUE(v->get("x")->is_float());
  EXPECT_EQ(v->get("x")->as_float(), 2.5);
  EXPECT_EQ(v->get("x")->as_int(), 0) << "a float is not an integer";
  ASSERT_EQ(v->get("list")->items().size(), 3u);
  EXPECT_EQ(v->get("list")->items()[0].as_string(), "a");
  EXPECT_EQ(v->get("list")->items()[1].as_int(), 1);
  EXPECT_TRUE(v->get("list")->items()[2].is_none());
  EXPECT_TRUE(v->get("pair")->is_tuple());
  EXPECT_EQ(v->get("pair")->items()[1].as_int(), 7);
  EXPECT_EQ(v->get("missing"), nullptr);
}

// Protocol 4 as Python writes it: FRAME, SHORT_BINUNICODE, MEMOIZE, BINGET,
// BININT1/2, LONG1 (negative), TUPLE2, EMPTY_TUPLE, APPEND, SETITEM.
TEST(PickleReader, ReadsProtocolFourOpcodes) {
  const std::string bytes(
      "\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00"  // PROTO 4, FRAME
      "}\x94"                                         // {} memo 0
      "\x8c\x01k\x94"                                 // 'k' memo 1
      "]\x94"                                         // [] memo 2
      "K\x05"
      "a"  // append 5
      "M\x00\x01"
      "a"  // append 256
      "\x8a\x01\xff"
      "a"  // append -1
      "h\x01"
      "a"  // append memo 1 ('k')
      ")"
      "a"  // append ()
      "s"  // d['k'] = list
      "h\x01"
      "K\x01K\x02\x86"
      "s"  // d['k'] = (1, 2) (replaces)
      ".",
      45);
  auto v = read_pickle(bytes);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  ASSERT_TRUE(v->is_dict());
  // As in Python, the second SETITEM of 'k' replaces the first; the list
  // is still reachable through the memo, which the reader shares.
  const pickle_value* k = v->get("k");
  ASSERT_NE(k, nullptr);
  ASSERT_TRUE(k->is_tuple());
  ASSERT_EQ(k->items().size(), 2u);
  EXPECT_EQ(k->items()[1].as_int(), 2);
}

TEST(PickleReader, MemoizedListsAreShared) {
  // [[1], h(memo of the inner list)]: both items are one list, as in Python.
  const std::string bytes(
      "\x80\x04]\x94(]\x94K\x01"
      "ah\x01"
      "e.",
      14);
  auto v = read_pickle(bytes);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  ASSERT_EQ(v->items().size(), 2u);
  EXPECT_EQ(v->items()[0].items().data(), v->items()[1].items().data());
  EXPECT_EQ(v->items()[1].items()[0].as_int(), 1);
}

TEST(PickleReader, UnsupportedOpcodesAreNamedWithTheirOffset) {
  // A class reference (GLOBAL) at offset 2.
  auto v =
      read_pickle(std::string("\x80\x02"
                              "cmodule\nname\n.",
                              16));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.code(), errc::invalid_argument);
  EXPECT_NE(v.error().message().find("offset 2: unsupported pickle opcode 0x63 (GLOBAL)"),
            std::string::npos)
      << v.error().message();
  // Every real opcode is named, never "unknown".
  for (const auto& [op, name] : {std::pair{'\x8e', "BINBYTES8"}, std::pair{'\x91', "FROZENSET"},
                                 std::pair{'\x8f', "EMPTY_SET"}, std::pair{'B', "BINBYTES"},
                                 std::pair{'R', "REDUCE"}, std::pair{'\x97', "NEXT_BUFFER"}}) {
    auto r = read_pickle(std::string("\x80\x04") + op + ".");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(std::string("(") + name + ")"), std::string::npos)
        << r.error().message();
  }
}

// The structural opcodes Python's pickler may use: POP, POP_MARK, DUP,
// LIST, DICT, LONG4, TUPLE1.
TEST(PickleReader, ReadsStackAndMarkOpcodes) {
  const char raw[] =
      "\x80\x04"
      "(K\x01K\x02l"  // [1, 2]
      "(\x8c\x01kK\x03"
      "d"                             // {'k': 3}
      "\x8b\x02\x00\x00\x00\xff\x7f"  // LONG4 32767
      "N0"                            // None, POP
      "(K\x09K\x09"
      "1"     // MARK 9 9 POP_MARK
      "2"     // DUP the LONG4
      "\x85"  // TUPLE1 of the copy
      "\x87"  // TUPLE3: ({'k': 3}, 32767, (32767,))
      "\x86"  // TUPLE2: ([1, 2], ...)
      ".";
  const std::string bytes(raw, sizeof raw - 1);
  auto v = read_pickle(bytes);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  ASSERT_TRUE(v->is_tuple());
  ASSERT_EQ(v->items().size(), 2u);
  EXPECT_EQ(v->items()[0].items()[1].as_int(), 2);
  const pickle_value& three = v->items()[1];
  ASSERT_EQ(three.items().size(), 3u);
  EXPECT_EQ(three.items()[0].get("k")->as_int(), 3);
  EXPECT_EQ(three.items()[1].as_int(), 32767);
  EXPECT_EQ(three.items()[2].items()[0].as_int(), 32767);
}

// Hostile input: deep nesting, cycles, a key given twice, ops reaching
// below a MARK. Each is an error with an offset, or (a repeated key) read
// as Python reads it; none crashes, recurses without bound or leaks.
TEST(PickleReader, HostileStructuresAreRefusedOrReadAsPythonDoes) {
  std::string deep_lists = "\x80\x04";
  for (int i = 0; i < 100000; ++i) deep_lists += ']';
  for (int i = 0; i < 99999; ++i) deep_lists += 'a';
  deep_lists += '.';
  std::string deep_tuples = "\x80\x04N";
  for (int i = 0; i < 2000000; ++i) deep_tuples += '\x85';
  deep_tuples += '.';
  for (const std::string* p : {&deep_lists, &deep_tuples}) {
    auto v = read_pickle(*p);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().message().find("nested deeper than 200 levels"), std::string::npos)
        << v.error().message();
  }
  // 200 levels are read.
  std::string ok_depth = "\x80\x04N";
  for (int i = 0; i < 199; ++i) ok_depth += '\x85';
  EXPECT_TRUE(read_pickle(ok_depth + ".").ok());

  struct bad {
    std::string bytes;
    std::string says;
  };
  for (const bad& b : {
           // d = {}; d['k'] = d
           bad{std::string("\x80\x04}\x94\x8c\x01k\x94h\x00s.", 12), "contains itself"},
           // a = []; b = [a]; a.append(b)
           bad{std::string("\x80\x04]\x94]\x94h\x00"
                           "aa.",
                           11),
               "changed after it was put"},
           // APPEND reaching below a MARK
           bad{std::string("\x80\x04](K\x01"
                           "0a.",
                           9),
               "APPEND without a list"},
           bad{std::string("\x80\x04](a.", 6), "APPEND without a list"},
           bad{std::string("\x80\x04K\x01(.", 6), "STOP with a stack"},
           bad{std::string("\x80\x04(00.", 6), "POP on an empty stack"},
           bad{std::string("\x80\x04\x8a\x0a\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01.", 15),
               "wider than 64 bits"},
       }) {
    auto v = read_pickle(b.bytes);
    ASSERT_FALSE(v.ok()) << b.says;
    EXPECT_NE(v.error().message().find(b.says), std::string::npos) << v.error().message();
    EXPECT_NE(v.error().message().find("offset "), std::string::npos);
  }
  // {'k': 1, 'k': 2} reads 2, as Python's dict would.
  auto twice = read_pickle(std::string("\x80\x04}(\x8c\x01kK\x01\x8c\x01kK\x02u.", 16));
  ASSERT_TRUE(twice.ok()) << twice.error().to_string();
  EXPECT_EQ(twice->get("k")->as_int(), 2);
}

TEST(PickleReader, TruncatedAndMalformedInputIsAnError) {
  for (const std::string& bad : {std::string("\x80\x02}", 3), std::string("\x80\x02X\x10\x00", 5),
                                 std::string("\x80\x09.", 3), std::string("\x80\x02u.", 4),
                                 std::string("\x80\x02h\x05.", 5), std::string()}) {
    auto v = read_pickle(bad);
    EXPECT_FALSE(v.ok()) << "accepted a bad pickle of " << bad.size() << " bytes";
    if (!v) {
      EXPECT_NE(v.error().message().find("offset"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace strata::replay
