// The trace readers on the bundled real traces and on small hand-made
// files: events, seeds of warm traces, the recording allocator's baseline,
// and errors that name the file and the line or event.
#include <gtest/gtest.h>

#include <fstream>

#include "replay/alloc_trace.hpp"
#include "strata/strata.hpp"

namespace strata::replay {
namespace {

const std::string traces = std::string(STRATA_SOURCE_DIR) + "/bench/traces/";

std::size_t count(const alloc_trace& t, op_kind k) {
  return static_cast<std::size_t>(
      std::count_if(t.ops.begin(), t.ops.end(), [&](const trace_op& o) { return o.kind == k; }));
}

TEST(TraceReaders, ColdPytorchSnapshot) {
  auto t = read_trace(traces + "cs336_forward_small_cold.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->format, "pytorch_snapshot");
  EXPECT_EQ(count(*t, op_kind::alloc), 36u);
  EXPECT_EQ(count(*t, op_kind::free), 26u);
  EXPECT_TRUE(t->seeds.empty());
  ASSERT_EQ(t->baseline_reserved.size(), t->ops.size());
  // The traces README gives PyTorch's peak reserved as 3.52 GiB.
  EXPECT_NEAR(static_cast<double>(t->baseline_peak) / (1 << 30), 3.52, 0.01);
  EXPECT_FALSE(t->frames.empty()) << "stack frames were not read";
}

TEST(TraceReaders, WarmPytorchSnapshotIsSeeded) {
  auto t = read_trace(traces + "cs336_inference_warm.pickle", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->seeds.size(), 223u) << "the traces README counts 223 blocks live at the start";
  EXPECT_EQ(count(*t, op_kind::alloc), 1280u);
  EXPECT_EQ(count(*t, op_kind::free), 1280u);
}

TEST(TraceReaders, DeviceIndexOutOfRange) {
  auto t = read_trace(traces + "cs336_forward_small_cold.pickle", 3);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("no device trace 3 (the file has 1)"), std::string::npos)
      << t.error().message();
}

TEST(TraceReaders, LifetimeCsv) {
  auto t = read_trace(traces + "resnet50_lifetimes.csv", 0);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->format, "lifetime_csv");
  EXPECT_EQ(count(*t, op_kind::alloc), 1042u);  // 2084 events: 1042 buffers
  EXPECT_EQ(count(*t, op_kind::free), 1042u);
  // Peak live as the traces README computes it: 1.41 GiB.
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  for (const trace_op& o : t->ops) {
    live = o.kind == op_kind::alloc ? live + o.size : live - o.size;
    peak = std::max(peak, live);
  }
  EXPECT_NEAR(static_cast<double>(peak) / (1 << 30), 1.41, 0.01);
  // Frees before allocations at equal times: [0,5) then [5,9) never overlap.
  auto small = read_lifetime_csv("id,lower,upper,size\n0,0,5,100\n1,5,9,200\n", "x.csv");
  ASSERT_TRUE(small.ok());
  ASSERT_EQ(small->ops.size(), 4u);
  EXPECT_EQ(small->ops[1].kind, op_kind::free);
  EXPECT_EQ(small->ops[2].kind, op_kind::alloc);
}

TEST(TraceReaders, RmmCsv) {
  auto t = read_rmm_csv(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,0.1,allocate,0x7f00,4096,0x0\n"
      "1,0.2,allocate,0x8f00,100,0x1234\n"
      "1,0.3,free,0x7f00,4096,0x0\n"
      "1,0.4,free,0x9f00,64,0x0\n"
      "1,0.5,allocate failure,0x0,999999999999,0x0\n",
      "log.csv");
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->ops.size(), 4u);
  EXPECT_EQ(t->ops[1].stream, 0x1234u);
  ASSERT_EQ(t->seeds.size(), 1u) << "a free of a block allocated before the log";
  EXPECT_EQ(t->seeds[0].addr, 0x9f00u);
}

TEST(TraceReaders, ErrorsNameTheFileAndLine) {
  struct bad {
    std::string text;
    std::string says;
  };
  for (const bad& b : {bad{"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,zz,0x0\n",
                           "log.csv:2: bad Size 'zz'"},
                       bad{"Thread,Time,Action,Pointer,Size,Stream\n1,0,grab,0x10,1,0x0\n",
                           "log.csv:2: unknown Action 'grab'"},
                       bad{"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate\n",
                           "log.csv:2: expected 6 fields"},
                       bad{"Thread,Time\n", "log.csv:1: expected the header"}}) {
    auto t = read_rmm_csv(b.text, "log.csv");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message().find(b.says), std::string::npos) << t.error().message();
  }
  auto l = read_lifetime_csv("id,lower,upper,size\n0,5,5,10\n", "l.csv");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message().find("l.csv:2: upper must be greater"), std::string::npos);
  auto missing = read_trace("/nonexistent/trace.pickle", 0);
  EXPECT_NE(missing.error().message().find("/nonexistent/trace.pickle: cannot open"),
            std::string::npos);
  const std::string path = ::testing::TempDir() + "strata_truncated.pickle";
  {
    std::ifstream in(traces + "cs336_forward_small_cold.pickle", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  auto truncated = read_trace(path, 0);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().message().find(path + ": offset"), std::string::npos)
      << truncated.error().message();
  auto unknown = read_strata_trace_json(R"({"events":[{"time_ns":1,"action":"alloc"}]})", "t.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("t.json: event 0"), std::string::npos);
}

TEST(TraceReaders, StrataTraceRoundTrip) {
  allocator_options o;
  o.device = "sim:capacity=64MiB";
  o.trace_buffer = 256;
  allocator a(o);
  void* p = a.malloc_async(3 << 20, nullptr);
  void* q = a.malloc_async(4096, nullptr);
  a.free_async(p, nullptr);
  auto t = read_strata_trace_json(a.trace_json(), "trace.json");
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->ops.size(), 3u);
  EXPECT_EQ(t->ops[0].addr, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(t->ops[2].kind, op_kind::free);
  // The pickle export reads back through the PyTorch path.
  auto snap = read_pytorch_snapshot(a.snapshot_pickle(), "snap.pickle", 0);
  ASSERT_TRUE(snap.ok()) << snap.error().to_string();
  EXPECT_EQ(snap->format, "strata_snapshot");
  EXPECT_EQ(snap->ops.size(), 3u);
  a.free_async(q, nullptr);
}

}  // namespace
}  // namespace strata::replay
