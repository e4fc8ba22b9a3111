// The options tables: one grammar for STRATA_CONF and device specs, the
// messages, and the docs' tables, which must be exactly what the tables
// render. After changing a table, rewrite the docs with
//   STRATA_UPDATE_DOCS=1 build/default/tests/allocator_tests --gtest_filter='OptionTables.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "sim_config.hpp"
#include "strata/allocator_options.hpp"
#include "strata/bucket_options.hpp"
#include "strata/conf_text.hpp"
#include "strata/device.hpp"
#include "strata/integration_options.hpp"
#include "strata/option_table.hpp"
#include "strata/prefetch_options.hpp"
#include "strata/tier_options.hpp"

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

// docs/configuration.md holds each section's table under its name.
TEST(OptionTables, ConfigurationDocIsEverySectionsTable) {
  std::string tables;
  for (const conf_section* s : conf_sections()) {
    tables += (tables.empty() ? "" : "\n") + std::string("### ") + std::string(s->name) + "\n\n" +
              s->markdown();
  }
  expect_doc_table("configuration.md", tables);
}

// One options table: every key belongs to exactly one section, and the
// sections come in the layers' order.
TEST(OptionTables, EveryKeyHasOneSection) {
  std::set<std::string_view> seen;
  std::vector<std::string_view> names;
  for (const conf_section* s : conf_sections()) {
    names.push_back(s->name);
    for (std::string_view k : s->keys()) {
      EXPECT_TRUE(seen.insert(k).second) << k << " is in two sections";
      for (const conf_section* other : conf_sections()) {
        EXPECT_EQ(other->has_key(k), other == s) << k << " in " << other->name;
      }
    }
  }
  EXPECT_EQ(names, (std::vector<std::string_view>{"allocator", "tiers", "prefetch", "gradients",
                                                  "integrations"}));
  EXPECT_EQ(seen.size(), 32U);
}

// STRATA_CONF is parsed once: every key and value is checked then, and each
// layer takes its own section from the text, leaving the others' keys.
TEST(OptionTables, EachLayerTakesItsSectionOfOneParse) {
  auto conf = conf_text::parse(
      "small_size:2MiB,host_capacity:1GiB,host_lookahead:64MiB,prefetch_inflight:4,"
      "bucket_reduce_dtype:bf16,buckets_inflight:3,report_on_exit:/tmp/r.txt");
  ASSERT_TRUE(conf.ok()) << conf.error().to_string();
  EXPECT_EQ(allocator_options_from(*conf)->small_size, 2U << 20);
  EXPECT_EQ(tier_options_from(*conf)->host_capacity, 1ULL << 30);
  EXPECT_EQ(tier_options_from(*conf)->host_lookahead, 64U << 20);
  EXPECT_EQ(prefetch_options_from(*conf)->prefetch_inflight, 4U);
  EXPECT_EQ(bucket_options_from(*conf)->reduce_type, dtype::bf16);
  EXPECT_EQ(bucket_options_from(*conf)->buckets_inflight, 3U);
  EXPECT_EQ(integration_options_from(*conf)->report_on_exit, "/tmp/r.txt");
  EXPECT_EQ(allocator_options_from(*conf, allocator_options{.device = "sim"})->device, "sim")
      << "a caller's defaults stand where the text says nothing";
  // A bad value of any section fails the one parse, and so every layer's.
  for (const char* bad : {"host_kept:2", "prefetch_inflight:0", "bucket_reduce_dtype:fp8",
                          "buckets_inflight:65", "small_size:1", "report_on_exit:"}) {
    EXPECT_EQ(conf_text::parse(bad).code(), errc::invalid_argument) << bad;
    EXPECT_EQ(parse_allocator_conf(bad).code(), errc::invalid_argument) << bad;
  }
  const auto unknown = conf_text::parse("colour:blue");
  ASSERT_FALSE(unknown.ok());
  for (const char* key :
       {"device", "nvme_dir", "reuse_distance", "bucket_bytes", "report_on_exit"}) {
    EXPECT_NE(unknown.error().message().find(key), std::string::npos)
        << "the unknown key's message lists every section's keys: " << unknown.error().message();
  }
  // The gradients' dtype word is stored as the buckets' own type and shown back.
  bucket_options b;
  b.reduce_type = dtype::f16;
  const auto& row = bucket_option_table()[3];
  ASSERT_EQ(row.rule.name, "bucket_reduce_dtype");
  EXPECT_EQ(option_text(row.rule, row.field(b)), "f16");
  b.reduce_type.reset();
  EXPECT_EQ(option_text(row.rule, row.field(b)), "same");
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
  tier_options t;
  EXPECT_TRUE(check_tier_options(t).ok());
  t.nvme_block_size = 0;
  EXPECT_NE(check_tier_options(t).message().find("'nvme_block_size'"), std::string::npos);
  EXPECT_TRUE(check_prefetch_options({}).ok());
  EXPECT_TRUE(check_bucket_options({}).ok());
  EXPECT_TRUE(check_integration_options({}).ok());
  bucket_options b;
  b.buckets_inflight = 0;
  EXPECT_NE(check_bucket_options(b).message().find("'buckets_inflight'"), std::string::npos);
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
