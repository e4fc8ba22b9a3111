// The `nccl` communicator over the stand-in CUDA driver and the stand-in
// NCCL (tests/fakecuda, tests/fakenccl): the same bits as the `local`
// communicator on 2, 4 and 8 ranks, registration (one physical allocation,
// NCCL #1820; NCCL older than 2.19), failures that reach every rank (a
// failed call, a rank that never calls), the torchrun bootstrap over TCP,
// and the errors for a missing or old NCCL. ctest runs these as fakenccl.*
// with both stand-ins on the library path; elsewhere they skip.
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "../fakenccl/fakenccl.h"
#include "rank_set.hpp"

namespace strata {
namespace {

using testing::comm_kind;
using testing::rank_set;

constexpr std::uint32_t seed = 20261124;

#define SKIP_WITHOUT_NCCL()                                                                \
  if (!testing::nccl_expected())                                                           \
  GTEST_SKIP() << "test skipped: runs over the stand-in NCCL (ctest fakenccl.*); no NCCL " \
                  "stand-in here"

// The stand-in's controls (fakenccl.h), from the library ctest names.
struct fakenccl_controls {
  int (*fail_call)(const char*, int, unsigned long long, int) = nullptr;
  void (*set_version)(int) = nullptr;
  unsigned long long (*live_comms)() = nullptr;
  void (*reset)() = nullptr;
};

const fakenccl_controls& controls() {
  static const fakenccl_controls c = [] {
    fakenccl_controls t;
    void* lib = dlopen(testing::nccl_stand_in(), RTLD_NOW | RTLD_LOCAL);  // stays loaded
    if (lib == nullptr) return t;
    t.fail_call = reinterpret_cast<decltype(t.fail_call)>(dlsym(lib, "fakenccl_fail_call"));
    t.set_version = reinterpret_cast<decltype(t.set_version)>(dlsym(lib, "fakenccl_set_version"));
    t.live_comms = reinterpret_cast<decltype(t.live_comms)>(dlsym(lib, "fakenccl_live_comms"));
    t.reset = reinterpret_cast<decltype(t.reset)>(dlsym(lib, "fakenccl_reset"));
    return t;
  }();
  return c;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t s) {
  std::mt19937 gen(s);
  std::uniform_real_distribution<float> dist(-1000.0F, 1000.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Runs the four collectives (fp32 sum, bf16 avg, reduce-scatter, all-gather
// in place, broadcast from the last rank) and returns every rank's bytes.
std::vector<std::vector<char>> run_collectives(rank_set& ranks) {
  const int k = ranks.size();
  const std::size_t n = 6000;
  const std::size_t per = n / static_cast<std::size_t>(k);  // rs holds the first n values
  std::vector<std::vector<char>> out(static_cast<std::size_t>(k));
  std::vector<float*> a;
  std::vector<std::uint16_t*> h;
  std::vector<float*> rs;
  std::vector<float*> b;
  for (int r = 0; r < k; ++r) {
    const auto v = random_floats(n, seed + static_cast<std::uint32_t>(r));
    a.push_back(ranks.alloc<float>(r, n));
    std::memcpy(a.back(), v.data(), n * sizeof(float));
    h.push_back(ranks.alloc<std::uint16_t>(r, n));
    for (std::size_t i = 0; i < n; ++i) {  // bf16: the top half of each value
      std::uint32_t bits = 0;
      std::memcpy(&bits, &v[i], 4);
      h.back()[i] = static_cast<std::uint16_t>(bits >> 16);
    }
    rs.push_back(ranks.alloc<float>(r, per * static_cast<std::size_t>(k)));
    std::memcpy(rs.back(), v.data(), per * static_cast<std::size_t>(k) * sizeof(float));
    b.push_back(ranks.alloc<float>(r, n));
    std::memcpy(b.back(), v.data(), n * sizeof(float));
  }
  for (int r = 0; r < k; ++r) {
    communicator& c = ranks.comm(r);
    const stream_handle s = ranks.stream(r);
    const auto i = static_cast<std::size_t>(r);
    EXPECT_TRUE(c.all_reduce(a[i], a[i], n, dtype::f32, reduce_op::sum, s).ok());
    EXPECT_TRUE(c.all_reduce(h[i], h[i], n, dtype::bf16, reduce_op::avg, s).ok());
    float* own = rs[i] + i * per;
    EXPECT_TRUE(c.reduce_scatter(rs[i], own, per, dtype::f32, reduce_op::sum, s).ok());
    EXPECT_TRUE(c.all_gather(own, rs[i], per, dtype::f32, s).ok());
    EXPECT_TRUE(c.broadcast(b[i], b[i], n, dtype::f32, k - 1, s).ok());
  }
  ranks.sync_all();
  for (int r = 0; r < k; ++r) {
    const auto i = static_cast<std::size_t>(r);
    auto& o = out[i];
    const auto append = [&o](const void* p, std::size_t bytes) {
      o.insert(o.end(), static_cast<const char*>(p), static_cast<const char*>(p) + bytes);
    };
    append(a[i], n * 4);
    append(h[i], n * 2);
    append(rs[i], per * static_cast<std::size_t>(k) * 4);
    append(b[i], n * 4);
    EXPECT_TRUE(ranks.comm(r).async_error().ok()) << ranks.comm(r).async_error().to_string();
  }
  return out;
}

class NcclRanks : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, NcclRanks, ::testing::Values(2, 4, 8));

TEST_P(NcclRanks, EveryCollectiveGivesTheLocalCommunicatorsBits) {
  SKIP_WITHOUT_NCCL();
  rank_set local(GetParam());
  rank_set nccl(GetParam(), comm_kind::nccl);
  const auto want = run_collectives(local);
  const auto got = run_collectives(nccl);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    const auto diff = std::mismatch(got[r].begin(), got[r].end(), want[r].begin());
    EXPECT_TRUE(diff.first == got[r].end())
        << "rank " << r << " differs from local at byte " << (diff.first - got[r].begin()) << " of "
        << got[r].size() << " (seed " << seed << ")";
  }
}

TEST(Nccl, RegistrationTakesOnePhysicalAllocation) {
  SKIP_WITHOUT_NCCL();
  rank_set ranks(2, comm_kind::nccl);
  device& d = ranks.dev(0);
  const std::size_t g = d.granularity();
  // One run mapped once: registered.
  auto gran = d.reserve(2 * g);
  ASSERT_TRUE(gran.ok());
  auto first = d.create_pages(g);
  auto second = d.create_pages(g);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(d.map(*gran, g, *first).ok());
  ASSERT_TRUE(d.map(*gran + g, g, *second).ok());
  ASSERT_TRUE(d.set_access(*gran, 2 * g).ok());
  auto h = ranks.comm(0).register_buffer(reinterpret_cast<void*>(*gran), g);
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  EXPECT_TRUE(ranks.comm(0).deregister_buffer(*h).ok());
  // Two runs stitched together (what VMM stitching makes): NCCL #1820.
  auto two = ranks.comm(0).register_buffer(reinterpret_cast<void*>(*gran), 2 * g);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.code(), errc::comm_error);
  EXPECT_NE(two.error().message().find("2 physical allocations"), std::string::npos)
      << two.error().message();
  ASSERT_TRUE(d.unmap(*gran, g).ok());
  ASSERT_TRUE(d.unmap(*gran + g, g).ok());
  ASSERT_TRUE(d.release_pages(*first).ok());
  ASSERT_TRUE(d.release_pages(*second).ok());
  ASSERT_TRUE(d.free_reservation(*gran, 2 * g).ok());
}

// Polls until every rank reports a comm_error, or 10 s pass.
void expect_every_rank_fails(rank_set& ranks, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int r = 0; r < ranks.size(); ++r) {
    while (ranks.comm(r).async_error().ok() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const status e = ranks.comm(r).async_error();
    EXPECT_EQ(e.code(), errc::comm_error) << "rank " << r << ": " << e.to_string();
    EXPECT_NE(e.message().find(text), std::string::npos) << "rank " << r << ": " << e.message();
  }
}

TEST(Nccl, ARankWhoseCallFailsMakesEveryRankFail) {
  SKIP_WITHOUT_NCCL();
  ASSERT_NE(controls().fail_call, nullptr);
  rank_set ranks(4, comm_kind::nccl);
  std::vector<float*> buf;
  for (int r = 0; r < 4; ++r) buf.push_back(ranks.alloc<float>(r, 256));
  // Rank 2's first all-reduce fails at the call (ncclInvalidArgument = 4).
  ASSERT_EQ(controls().fail_call("ncclAllReduce", 2, 1, 4), 0);
  for (int r = 0; r < 4; ++r) {
    const status s =
        ranks.comm(r).all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)],
                                 256, dtype::f32, reduce_op::sum, ranks.stream(r));
    EXPECT_EQ(s.ok(), r != 2) << s.to_string();
  }
  expect_every_rank_fails(ranks, "");
  ranks.sync_all();  // nothing hangs: the aborted collective let the streams go
  EXPECT_NE(ranks.comm(0).async_error().message().find("remote"), std::string::npos)
      << ranks.comm(0).async_error().message();
  EXPECT_EQ(ranks.comm(0)
                .all_reduce(buf[0], buf[0], 256, dtype::f32, reduce_op::sum, ranks.stream(0))
                .code(),
            errc::comm_error)
      << "a failed communicator stays failed";
}

TEST(Nccl, ARankThatNeverCallsTimesOutOnEveryOtherRank) {
  SKIP_WITHOUT_NCCL();
  rank_set ranks(3, comm_kind::nccl, {}, "",
                 testing::test_nccl_options(std::chrono::milliseconds(300)));
  std::vector<float*> buf;
  for (int r = 0; r < 3; ++r) buf.push_back(ranks.alloc<float>(r, 64));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {  // rank 2 never calls
    ASSERT_TRUE(ranks.comm(r)
                    .all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)],
                                64, dtype::f32, reduce_op::sum, ranks.stream(r))
                    .ok());
  }
  // The first watchdog to fire aborts its rank; the other rank hears of it
  // from NCCL (a remote error) or times out itself.
  int timed_out = 0;
  for (int r = 0; r < 2; ++r) {
    const auto deadline = t0 + std::chrono::seconds(10);
    while (ranks.comm(r).async_error().ok() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string m = ranks.comm(r).async_error().message();
    const bool mine = m.find("did not finish within 300 ms") != std::string::npos;
    timed_out += mine ? 1 : 0;
    EXPECT_TRUE(mine || m.find("aborted its communicator") != std::string::npos)
        << "rank " << r << ": " << m;
  }
  EXPECT_GE(timed_out, 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  ranks.sync_all();
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Nccl, TorchrunBootstrapExchangesTheIdOverTcp) {
  SKIP_WITHOUT_NCCL();
  const int port = free_port();
  ASSERT_GT(port, 0);
  std::vector<std::unique_ptr<allocator>> allocs;
  for (int r = 0; r < 4; ++r) {
    allocator_options ao;
    ao.device = "cuda:" + std::to_string(r);
    ao.log_ooms = false;
    allocs.push_back(std::make_unique<allocator>(ao));
  }
  std::vector<result<std::unique_ptr<communicator>>> made;
  for (int r = 0; r < 4; ++r) made.emplace_back(status{errc::comm_error, "not run"});
  {
    std::vector<std::jthread> threads;
    // Rank 0 comes last: the others retry until it listens.
    for (int r = 3; r >= 0; --r) {
      threads.emplace_back([&, r] {
        const launcher_env env{r, 4, r, "127.0.0.1", port};
        made[static_cast<std::size_t>(r)] = create_nccl_communicator(
            allocs[static_cast<std::size_t>(r)]->dev(), env, testing::test_nccl_options());
      });
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::vector<float*> buf;
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(made[static_cast<std::size_t>(r)].ok())
        << made[static_cast<std::size_t>(r)].error().to_string();
    buf.push_back(
        static_cast<float*>(allocs[static_cast<std::size_t>(r)]->malloc(16 * sizeof(float))));
    std::fill_n(buf.back(), 16, static_cast<float>(r + 1));
  }
  for (int r = 0; r < 4; ++r) {
    communicator& c = **made[static_cast<std::size_t>(r)];
    ASSERT_TRUE(c.all_reduce(buf[static_cast<std::size_t>(r)], buf[static_cast<std::size_t>(r)], 16,
                             dtype::f32, reduce_op::sum, stream_handle{})
                    .ok());
  }
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(allocs[static_cast<std::size_t>(r)]->dev().synchronize_stream({}).ok());
    EXPECT_EQ(buf[static_cast<std::size_t>(r)][15], 10.0F) << "rank " << r;
  }
  for (int r = 0; r < 4; ++r)
    allocs[static_cast<std::size_t>(r)]->free(buf[static_cast<std::size_t>(r)]);
  made.clear();
}

TEST(Nccl, BootstrapErrorsSayWhatIsMissing) {
  SKIP_WITHOUT_NCCL();
  allocator_options ao;
  ao.device = "cuda:0";
  allocator a(ao);
  nccl_options o = testing::test_nccl_options();
  o.bootstrap_timeout = std::chrono::milliseconds(200);
  const int port = free_port();
  auto lonely = create_nccl_communicator(a.dev(), launcher_env{1, 2, 1, "127.0.0.1", port}, o);
  ASSERT_FALSE(lonely.ok());
  EXPECT_EQ(lonely.code(), errc::comm_error);
  EXPECT_NE(lonely.error().message().find("found no rank 0"), std::string::npos)
      << lonely.error().message();
  auto waiting = create_nccl_communicator(a.dev(), launcher_env{0, 3, 0, "127.0.0.1", port}, o);
  ASSERT_FALSE(waiting.ok());
  EXPECT_NE(waiting.error().message().find("rank(s) 1 2 never connected"), std::string::npos)
      << waiting.error().message();
  auto bad = create_nccl_communicator(a.dev(), launcher_env{2, 2, 0, "127.0.0.1", port}, o);
  EXPECT_EQ(bad.code(), errc::invalid_argument);

  ::setenv("WORLD_SIZE", "2", 1);  // NOLINT(concurrency-mt-unsafe): one thread here
  ::setenv("RANK", "5", 1);        // NOLINT(concurrency-mt-unsafe)
  auto env = launcher_env_from_environment();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message().find("RANK=5 is not a number in [0, 1]"), std::string::npos)
      << env.error().message();
  ::setenv("RANK", "1", 1);             // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("MASTER_ADDR");            // NOLINT(concurrency-mt-unsafe)
  ::setenv("MASTER_PORT", "29500", 1);  // NOLINT(concurrency-mt-unsafe)
  env = launcher_env_from_environment();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message().find("MASTER_ADDR is not set"), std::string::npos);
  ::setenv("MASTER_ADDR", "localhost", 1);  // NOLINT(concurrency-mt-unsafe)
  env = launcher_env_from_environment();
  ASSERT_TRUE(env.ok()) << env.error().to_string();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_EQ(env->master_port, 29500);
}

TEST(Nccl, AMissingOrOldNcclIsAClearError) {
  SKIP_WITHOUT_NCCL();
  allocator_options ao;
  ao.device = "cuda:0";
  allocator a(ao);
  nccl_options o = testing::test_nccl_options();
  o.library = "libnccl-that-is-not-there.so.2";
  auto none = nccl_unique_id(o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.code(), errc::not_supported);
  EXPECT_NE(none.error().message().find("cannot load NCCL"), std::string::npos);

  // The library is read once per name: other spellings of the stand-in's
  // path give it a fresh look at the version.
  ASSERT_NE(controls().set_version, nullptr);
  const std::string path = testing::nccl_stand_in();
  const std::string dir = path.substr(0, path.rfind('/'));
  controls().set_version(20903);
  o.library = dir + "//libnccl.so.2";
  auto old = nccl_unique_id(o);
  EXPECT_EQ(old.code(), errc::not_supported);
  EXPECT_NE(old.error().message().find("is NCCL 2.9.3; Strata needs NCCL 2.10"), std::string::npos)
      << old.error().message();

  controls().set_version(21803);
  o.library = dir + "/./libnccl.so.2";
  auto id = nccl_unique_id(o);
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  auto comm = create_nccl_communicator(a.dev(), 0, 1, *id, o);
  controls().reset();
  ASSERT_TRUE(comm.ok()) << comm.error().to_string();
  void* p = a.malloc(4096);
  auto reg = (*comm)->register_buffer(p, 4096);
  EXPECT_EQ(reg.code(), errc::not_supported);
  EXPECT_NE(reg.error().message().find("needs NCCL 2.19"), std::string::npos);
  a.free(p);
}

}  // namespace
}  // namespace strata
