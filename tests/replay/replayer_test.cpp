// The replayer on bundled real traces: peaks, the baseline comparison, OOMs
// with their event index, and the JSON report's stable fields.
#include <gtest/gtest.h>

#include "replay/alloc_trace.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"

namespace strata::replay {
namespace {

const std::string traces = std::string(STRATA_SOURCE_DIR) + "/bench/traces/";

TEST(Replayer, ColdTraceOnAnEightyGigabyteSimDevice) {
  auto t = read_trace(traces + "cs336_forward_small_cold.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  auto r = replay(*t, {});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->events, 62u);
  EXPECT_NEAR(static_cast<double>(r->peak_live) / (1 << 30), 3.03, 0.01);  // traces README
  EXPECT_TRUE(r->ooms.empty());
  EXPECT_GE(r->peak_allocated, r->peak_live);
  EXPECT_GE(r->peak_reserved, r->peak_allocated);
  EXPECT_TRUE(r->has_baseline);
  EXPECT_LE(r->peak_reserved, r->baseline_peak_reserved) << "more than PyTorch reserved";
  EXPECT_EQ(r->calls, 62u);
  EXPECT_GT(r->cpu_ns_median, 0);
  EXPECT_FALSE(r->samples.empty());
  EXPECT_FALSE(r->largest_at_peak.empty());
  EXPECT_FALSE(r->page_map_at_peak.empty());
  const std::string json = report_json(*t, *r);
  for (const char* key : {R"("events":62)", R"("peak_live_bytes":)", R"("peak_reserved_bytes":)",
                          R"("fragmentation":)", R"("ooms":[])", R"("cpu_ns_per_call":{"median":)",
                          R"("p99":)", R"("baseline_peak_reserved_bytes":)"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing from " << json;
  }
}

TEST(Replayer, WarmTraceSeedsItsLiveBlocks) {
  auto t = read_trace(traces + "cs336_inference_warm.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  auto r = replay(*t, {});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->events, 223u + 2560u);
  EXPECT_TRUE(r->ooms.empty());
  EXPECT_LE(r->peak_reserved, r->baseline_peak_reserved);
}

TEST(Replayer, OomsAreReportedAtTheirEvent) {
  auto t = read_trace(traces + "cs336_forward_small_cold.pickle", 0);
  ASSERT_TRUE(t.ok());
  replay_options o;
  o.device = "sim:capacity=1GiB";
  auto r = replay(*t, o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_FALSE(r->ooms.empty());
  const replay_oom& first = r->ooms.front();
  EXPECT_EQ(t->ops[first.op].kind, op_kind::alloc);
  EXPECT_EQ(t->ops[first.op].size, first.size);
  EXPECT_NE(first.message.find("verdict:"), std::string::npos) << first.message;
  EXPECT_NE(first.report_json.find("\"requested\":" + std::to_string(first.size)),
            std::string::npos);
  EXPECT_NE(report_text(*t, *r).find("OOM at event " + std::to_string(first.op)),
            std::string::npos);
  EXPECT_NE(report_html(*t, *r).find("At event " + std::to_string(first.op)), std::string::npos);
}

TEST(Replayer, BadConfIsAnError) {
  auto t = read_trace(traces + "cs336_forward_small_cold.pickle", 0);
  ASSERT_TRUE(t.ok());
  replay_options o;
  o.conf = "colour:blue";
  auto r = replay(*t, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("--conf: "), std::string::npos);
  o.conf = "device:sim";
  EXPECT_FALSE(replay(*t, o).ok());
}

}  // namespace
}  // namespace strata::replay
