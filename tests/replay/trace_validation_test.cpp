// What the readers accept beyond the common case (OOM entries, failure rows,
// blocks without addresses, unknown actions) and what they refuse: every
// wrong value is an error naming the file and the event or line.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <limits>

#include "pickle_writer.hpp"
#include "replay/alloc_trace.hpp"
#include "replay/replayer.hpp"

namespace strata::replay {
namespace {

const std::string formats = std::string(STRATA_SOURCE_DIR) + "/bench/traces/formats/";
constexpr std::uint64_t MiB = 1 << 20;

TEST(TraceFormats, OomEntriesOfExpandableSegmentsSnapshot) {
  auto t = read_trace(formats + "oom_expandable.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->failures.size(), 1u);
  EXPECT_EQ(t->failures[0].size, 64 * MiB);
  EXPECT_EQ(t->failures[0].device_free, 30 * MiB);
  EXPECT_TRUE(t->failures[0].device_free_known);
  EXPECT_EQ(t->failures[0].before_op, 3u) << "after the three allocations";
  EXPECT_EQ(t->failures[0].where, "event 6");
  EXPECT_TRUE(t->unknown_actions.empty()) << "snapshot and user_defined are known markers";
  EXPECT_EQ(t->baseline_peak, 40 * MiB) << "segment_map/segment_unmap drive the baseline";
}

TEST(TraceFormats, BlocksWithoutAddressAreWalkedLikeTheViewer) {
  auto t = read_trace(formats + "no_block_address.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->seeds.size(), 2u);
  const std::uint64_t base = 0x7E0000000000;
  EXPECT_EQ(t->seeds[0].addr, base);
  EXPECT_EQ(t->seeds[0].size, 2 * MiB);
  EXPECT_EQ(t->seeds[1].addr, base + 6 * MiB) << "2 + 4 MiB of blocks before it";
  EXPECT_EQ(t->seeds[1].size, 5 * MiB) << "its requested size";
}

TEST(TraceFormats, RmmFailureRowsInBothFormats) {
  for (const char* name : {"rmm_failure_fmt.csv", "rmm_failure_current.csv"}) {
    auto t = read_trace(formats + name, 0);
    ASSERT_TRUE(t.ok()) << name << ": " << t.error().to_string();
    EXPECT_EQ(t->ops.size(), 6u) << name;
    ASSERT_EQ(t->failures.size(), 1u) << name;
    EXPECT_EQ(t->failures[0].size, std::uint64_t{40} << 30);
    EXPECT_FALSE(t->failures[0].device_free_known);
    EXPECT_EQ(t->failures[0].where, "line 4");
    EXPECT_EQ(t->failures[0].before_op, 2u);
  }
  // %llx-era rows: hex without a prefix.
  auto bare = read_rmm_csv(
      "Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,7f00a0,64,0\n1,t,free,7f00a0,64,0\n",
      "b.csv");
  ASSERT_TRUE(bare.ok()) << bare.error().to_string();
  EXPECT_EQ(bare->ops[0].addr, 0x7f00a0u);
}

// Whether Strata had the memory where the recording allocator failed
// depends on the card it replays on: 32 MiB are live at the OOM.
TEST(TraceFormats, ReplayAnswersWhetherStrataHadTheMemory) {
  auto t = read_trace(formats + "oom_expandable.pickle", 0);
  ASSERT_TRUE(t.ok());
  for (const auto& [capacity, fits] : {std::pair{"70MiB", false}, std::pair{"128MiB", true}}) {
    replay_options o;
    o.device = std::string("sim:capacity=") + capacity;
    auto r = replay(*t, o);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_EQ(r->failures.size(), 1u);
    EXPECT_EQ(r->failures[0].fits, fits) << capacity;
    EXPECT_GE(r->failures[0].strata_available, fits ? 64 * MiB : 0) << capacity;
  }
}

// A snapshot of `count` events, event i written by `fill(i, w)` inside its
// dict; `segments` false writes `segments: 5` instead of a list.
std::string snapshot_of(std::size_t count,
                        const std::function<void(std::size_t, pickle_writer&)>& fill,
                        bool segments = true) {
  pickle_writer w;
  w.begin_dict();
  w.key("segments");
  if (segments) {
    w.begin_list();
    w.end_list();
  } else {
    w.integer(5);
  }
  w.key("device_traces");
  w.begin_list();
  w.begin_list();
  for (std::size_t i = 0; i < count; ++i) {
    w.begin_dict();
    fill(i, w);
    w.end_dict();
  }
  w.end_list();
  w.end_list();
  w.end_dict();
  return std::move(w).finish();
}

std::string snapshot_with(const std::function<void(pickle_writer&)>& fill, bool segments = true) {
  return snapshot_of(
      1, [&](std::size_t, pickle_writer& w) { fill(w); }, segments);
}

TEST(TraceValidation, WrongFieldValuesAreErrorsNamingTheEvent) {
  struct bad {
    std::function<void(pickle_writer&)> fill;
    std::string says;
  };
  const auto alloc = [](pickle_writer& w) { w.field("action", "alloc"); };
  for (const bad& b : {
           bad{[&](pickle_writer& w) {
                 alloc(w);
                 w.field_uint("addr", 4096);
                 w.field("size", "512");
               },
               "event 0 (alloc): 'size' is a string, expected an integer"},
           bad{[&](pickle_writer& w) {
                 alloc(w);
                 w.field_uint("addr", 4096);
                 w.key("size");
                 w.integer(-1);
               },
               "'size' is -1, expected 0 to"},
           bad{[&](pickle_writer& w) {
                 alloc(w);
                 w.field_uint("addr", 4096);
                 w.key("size");
                 w.real(std::numeric_limits<double>::quiet_NaN());
               },
               "'size' is a float"},
           bad{[&](pickle_writer& w) {
                 alloc(w);
                 w.key("addr");
                 w.none();
                 w.field_uint("size", 1);
               },
               "'addr' is None"},
           bad{[&](pickle_writer& w) {
                 w.key("action");
                 w.integer(3);
               },
               "event 0: 'action' is an integer, expected a string"},
           bad{[&](pickle_writer& w) {
                 w.field("action", "segment_alloc");
                 w.field_uint("addr", 4096);
                 w.field_uint("size", std::uint64_t{1} << 62);
               },
               "'size' is 4611686018427387904, expected 0 to 1125899906842624"},
           bad{[&](pickle_writer& w) {
                 w.field("action", "oom");
                 w.field_uint("size", 1);
               },
               "event 0 (oom): no 'device_free'"},
       }) {
    auto t = read_pytorch_snapshot(snapshot_with(b.fill), "s.pickle", 0);
    ASSERT_FALSE(t.ok()) << b.says;
    EXPECT_NE(t.error().message().find("s.pickle: " + b.says.substr(0, 0)), std::string::npos);
    EXPECT_NE(t.error().message().find(b.says), std::string::npos) << t.error().message();
  }
  auto not_list = read_pytorch_snapshot(snapshot_with(alloc, false), "s.pickle", 0);
  ASSERT_FALSE(not_list.ok());
  EXPECT_NE(not_list.error().message().find("'segments' is an integer, expected a list"),
            std::string::npos)
      << not_list.error().message();
}

TEST(TraceValidation, UnknownActionsAreCountedByName) {
  const std::string bytes = snapshot_of(3, [](std::size_t i, pickle_writer& w) {
    w.field("action", i == 2 ? "teleport" : "defrag");
  });
  auto t = read_pytorch_snapshot(bytes, "s.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->unknown_actions.size(), 2u);
  EXPECT_EQ(t->unknown_actions[0].name, "defrag");
  EXPECT_EQ(t->unknown_actions[0].count, 2u);
  EXPECT_EQ(t->unknown_actions[0].first, "event 0");
  EXPECT_EQ(t->unknown_actions[1].name, "teleport");
}

TEST(TraceValidation, DoubleFreesAreErrorsInEveryFormat) {
  const std::string bytes = snapshot_of(3, [](std::size_t i, pickle_writer& w) {
    w.field("action", i == 0 ? "alloc" : "free_requested");
    w.field_uint("addr", 4096);
    w.field_uint("size", 512);
  });
  auto snap = read_pytorch_snapshot(bytes, "s.pickle", 0);
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.error().message().find("event 2 (free_requested): frees 0x1000, which event 1 "
                                        "already freed (a double free)"),
            std::string::npos)
      << snap.error().message();
  auto rmm = read_rmm_csv(
      "Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,8,0x0\n1,t,free,0x10,8,0x0\n"
      "1,t,free,0x10,8,0x0\n",
      "r.csv");
  ASSERT_FALSE(rmm.ok());
  EXPECT_NE(rmm.error().message().find("r.csv:4: frees a pointer that line 3 already freed"),
            std::string::npos)
      << rmm.error().message();
}

TEST(TraceValidation, LifetimesOfOneIdMayNotOverlap) {
  auto overlap = read_lifetime_csv("id,lower,upper,size\n7,0,10,100\n7,5,20,100\n", "l.csv");
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.error().message().find("l.csv:3: id 7 is live on lines 2 and 3 at once"),
            std::string::npos)
      << overlap.error().message();
  // One id reused after its buffer died is two buffers, both replayed.
  auto reused = read_lifetime_csv("id,lower,upper,size\n7,0,10,100\n7,10,20,300\n", "l.csv");
  ASSERT_TRUE(reused.ok()) << reused.error().to_string();
  EXPECT_EQ(reused->ops.size(), 4u);
}

TEST(TraceValidation, WhatIsNotATraceFileIsRefusedBeforeReading) {
  auto dir = read_trace(formats, 0);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message().find(": is a directory"), std::string::npos);
  auto zero = read_trace("/dev/zero", 0);  // would never end
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message().find("/dev/zero: not a regular file or a pipe"),
            std::string::npos)
      << zero.error().message();
}

TEST(TraceValidation, AByteOrderMarkBeforeACsvIsSkipped) {
  const std::string path = ::testing::TempDir() + "strata_bom.csv";
  std::ofstream(path, std::ios::binary) << "\xEF\xBB\xBFid,lower,upper,size\n0,0,5,100\n";
  auto t = read_trace(path, 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->ops.size(), 2u);
}

TEST(TraceValidation, TooManyStreamsIsAnErrorNamingTheFileAndEvent) {
  alloc_trace t;
  t.source = "many.pickle";
  for (std::uint64_t s = 1; s <= max_replay_streams + 1; ++s) {
    trace_op op;
    op.addr = s * 4096;
    op.size = 512;
    op.stream = s;
    t.ops.push_back(op);
  }
  replay_options o;
  o.device = "sim:capacity=1GiB";
  auto r = replay(t, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.error().message().find("many.pickle: event 256: the trace uses more than 256 streams"),
      std::string::npos)
      << r.error().message();
}

}  // namespace
}  // namespace strata::replay
