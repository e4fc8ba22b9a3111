// The options tables: one grammar for STRATA_CONF and device specs, the
// messages, and the docs' tables, which must be exactly what the tables
// render. After changing a table, rewrite the docs with
//   STRATA_UPDATE_DOCS=1 build/default/tests/allocator_tests --gtest_filter='OptionTables.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "sim_config.hpp"
#include "strata/allocator_options.hpp"
#include "strata/device.hpp"
#include "strata/option_table.hpp"

namespace strata::testing {
namespace {

// Compares the part of `doc` between `begin` and `end` markers with `table`;
// rewrites it instead when STRATA_UPDATE_DOCS is set.
void expect_doc_table(const std::string& doc, const std::string& table) {
  const std::string path = std::string(STRATA_TEST_SOURCE_DIR) + "/../docs/" + doc;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  const std::string begin = "<!-- generated from the options table: do not edit -->\n";
  const std::string end = "<!-- end of the generated table -->";
  const auto b = all.find(begin);
  const auto e = all.find(end);
  ASSERT_NE(b, std::string::npos) << path << " has no generated table";
  ASSERT_NE(e, std::string::npos) << path << " has no end of the generated table";
  const std::string current = all.substr(b + begin.size(), e - b - begin.size());
  if (std::getenv("STRATA_UPDATE_DOCS") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
    all.replace(b + begin.size(), e - b - begin.size(), table);
    std::ofstream(path) << all;
    return;
  }
  EXPECT_EQ(current, table) << path
                            << " differs from the options table; rewrite it with "
                               "STRATA_UPDATE_DOCS=1 (see this test's header)";
}

TEST(OptionTables, ConfigurationDocIsTheAllocatorTable) {
  expect_doc_table("configuration.md", options_markdown(allocator_option_table()));
}

TEST(OptionTables, DeviceDocIsTheSimTable) {
  expect_doc_table("device.md", options_markdown(sim_config_table()));
}

TEST(OptionTables, DefaultsPassTheirOwnChecks) {
  EXPECT_TRUE(check_allocator_options({}).ok());
  allocator_options o;
  o.memory_fraction = 0;
  EXPECT_NE(check_allocator_options(o).message().find("'memory_fraction'"), std::string::npos);
  o = {};
  o.small_size = 100;
  EXPECT_NE(check_allocator_options(o).message().find("512B to 64MiB"), std::string::npos);
  o = {};
  o.offload.nvme_block_size = 0;
  EXPECT_NE(check_allocator_options(o).message().find("'nvme_block_size'"), std::string::npos);
}

// The grammar is one: the same text is accepted or refused by STRATA_CONF
// and by a device spec alike, whatever the separator.
TEST(OptionTables, ConfAndDeviceSpecsShareOneGrammar) {
  struct text_pair {
    const char* conf;
    const char* spec;
    bool ok;
  };
  for (const auto& t : {text_pair{"release_threshold:1GiB", "sim:capacity=8GiB", true},
                        text_pair{"release_threshold:1GiB,", "sim:capacity=8GiB,", false},
                        text_pair{",release_threshold:1GiB", "sim:,capacity=8GiB", false},
                        text_pair{"memory_fraction:0.5,,small_size:1MiB",
                                  "sim:capacity=8GiB,,granularity=2MiB", false},
                        text_pair{" memory_fraction : 0.5 ", "sim: capacity = 8GiB ", true},
                        text_pair{"memory_fraction:\t0.5", "sim:capacity=\t8GiB", true},
                        text_pair{"memory_fraction:", "sim:capacity=", false},
                        text_pair{":0.5", "sim:=8GiB", false}}) {
    EXPECT_EQ(parse_allocator_conf(t.conf).ok(), t.ok) << t.conf;
    EXPECT_EQ(open_device(t.spec).ok(), t.ok) << t.spec;
  }
}

TEST(OptionTables, NumbersTakeExponentsAndOutOfRangeSaysTheRange) {
  EXPECT_TRUE(open_device("sim:capacity=64MiB,h2d_gbps=1e3").ok());
  auto huge = open_device("sim:capacity=64MiB,h2d_gbps=1e308");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message().find("'h2d_gbps': expected a number in [0, 1e+06] (GB/s)"),
            std::string::npos)
      << huge.error().message();
  auto fraction = parse_allocator_conf("memory_fraction:5e-1");
  ASSERT_TRUE(fraction.ok());
  EXPECT_DOUBLE_EQ(fraction->memory_fraction, 0.5);
  EXPECT_FALSE(parse_allocator_conf("memory_fraction:inf").ok());
  EXPECT_FALSE(parse_allocator_conf("memory_fraction:nan").ok());
}

TEST(OptionTables, WordsForSentinelsAndNothingElse) {
  EXPECT_EQ(parse_allocator_conf("release_threshold:none")->release_threshold,
            allocator_options{}.release_threshold);
  auto never = open_device("sim:capacity=64MiB,fail_map_after=never");
  EXPECT_TRUE(never.ok());
  // The sentinel's number is not a way around the word.
  EXPECT_FALSE(parse_allocator_conf("host_capacity:0").ok());
  EXPECT_FALSE(open_device("sim:fail_map_after=18446744073709551615").ok());
}

}  // namespace
}  // namespace strata::testing
