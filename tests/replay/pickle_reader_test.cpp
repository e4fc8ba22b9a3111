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
  EXPECT_EQ(v->get("x")->as_int(), 2);
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
  EXPECT_NE(v.error().message().find("offset 2: unsupported pickle opcode 0x63 ('c', GLOBAL)"),
            std::string::npos)
      << v.error().message();
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
