#include "strata/option_table.hpp"

#include <gtest/gtest.h>

namespace strata::testing {
namespace {

TEST(ByteSize, UnitsAndFractions) {
  EXPECT_EQ(*parse_byte_size("k", "4096"), 4096u);
  EXPECT_EQ(*parse_byte_size("k", "2MiB"), 2u << 20);
  EXPECT_EQ(*parse_byte_size("k", "80GiB"), 80ull << 30);
  EXPECT_EQ(*parse_byte_size("k", "1TiB"), 1ull << 40);
  EXPECT_EQ(*parse_byte_size("k", "1.5GiB"), 3ull << 29);
  EXPECT_EQ(*parse_byte_size("k", "3KB"), 3000u);
  EXPECT_EQ(*parse_byte_size("k", "7B"), 7u);
}

TEST(ByteSize, BadInputNamesTheKey) {
  for (const char* bad : {"", "-1", "1.3B", "2XiB", "GiB", "99999999999TiB", "1e3", "0x10"}) {
    auto r = parse_byte_size("capacity", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message().find("'capacity'"), std::string::npos) << bad;
  }
}

TEST(OptionList, SplitsAndTrims) {
  auto r = parse_option_list(" a=1, b = 2 ,c=x:y", '=', "test");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].key, "b");
  EXPECT_EQ((*r)[1].value, "2");
  EXPECT_EQ((*r)[2].value, "x:y");
  EXPECT_TRUE(parse_option_list("", '=', "test")->empty());
  EXPECT_FALSE(parse_option_list("a=1,,b=2", '=', "test").ok());
  EXPECT_FALSE(parse_option_list("a=", '=', "test").ok());
}

TEST(Counts, RejectSignsAndJunk) {
  EXPECT_EQ(*parse_count("n", "42"), 42u);
  EXPECT_FALSE(parse_count("n", "-1").ok());
  EXPECT_FALSE(parse_count("n", "4x").ok());
  EXPECT_DOUBLE_EQ(*parse_number("r", "0.5"), 0.5);
  EXPECT_FALSE(parse_number("r", "nan").ok());
}

TEST(FormatBytes, ReadableUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(2u << 20), "2 MiB");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace strata::testing
