// Write-behind (tiers/write_behind.cpp): host buffers get an NVMe copy in
// the background, so pushing them off the host writes nothing; a buffer
// written while its write-behind runs does not keep that write's extent; a
// failing write-behind leaves the buffer on the host and is not retried in
// a loop; unregister does not wait for a write under way. A gate in the store's
// fault hook holds the I/O thread's writes, so the tests choose what
// happens during one.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "strata/nvme_store.hpp"
#include "strata/residency.hpp"

namespace strata::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
using std::chrono::milliseconds;

std::string scratch() {
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/write_behind";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

// Writes from any thread but the test's (the I/O thread's write-behinds):
// held while the gate is shut, failed with `fail_with` if set.
class write_gate : public io_faults {
 public:
  int complete(io_kind kind, std::uint64_t /*offset*/, void* /*buffer*/, std::size_t /*length*/,
               int result) override {
    if (kind != io_kind::write || std::this_thread::get_id() == test_thread_) return result;
    std::unique_lock lock(mu_);
    ++background_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
    return fail_with_ != 0 ? fail_with_ : result;
  }
  void shut() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  void fail_with(int error) {
    std::lock_guard lock(mu_);
    fail_with_ = error;
  }
  // Waits until a background write has reached the store; false after 10 s.
  bool wait_for_background() {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return background_ > 0; });
  }

 private:
  std::thread::id test_thread_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable changed_;
  bool open_ = true;
  int fail_with_ = 0;
  int background_ = 0;
};

struct setup {
  std::unique_ptr<allocator> alloc;
  std::unique_ptr<residency_manager> manager;
  stream_handle stream{};
  std::vector<std::uint64_t> handles;
  std::vector<std::vector<unsigned char>> bytes;
  std::mt19937 rng{20261125};

  setup(std::uint64_t host_capacity, io_faults* faults) {
    allocator_options options;
    options.device = "sim:capacity=8MiB";
    options.log_ooms = false;
    alloc = std::make_unique<allocator>(options);
    stream = *alloc->dev().create_stream();
    tier_options o;
    o.host_chunk = 2 * mib;
    o.host_capacity = host_capacity;
    o.nvme_dir = scratch();
    o.nvme_block_size = 256 << 10;
    o.nvme_queue_depth = 4;
    auto m = residency_manager::create(*alloc, o, faults);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    if (m) manager = std::move(*m);
  }
  // Registers n buffers of 1 MiB and writes each once, in order.
  void add(int n) {
    for (int i = 0; i < n; ++i) {
      auto h =
          manager->register_buffer(mib, buffer_kind::optimizer_state, residency_policy::evictable);
      ASSERT_TRUE(h.ok());
      handles.push_back(*h);
      bytes.emplace_back(mib);
      write(handles.size() - 1);
    }
  }
  // Acquires buffer k read_write, writes new bytes, releases.
  void write(std::size_t k) {
    auto p = manager->acquire(handles[k], stream.native);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    ASSERT_TRUE(alloc->dev().synchronize_stream(stream).ok());
    for (auto& b : bytes[k]) b = static_cast<unsigned char>(rng());
    std::memcpy(*p, bytes[k].data(), mib);
    ASSERT_TRUE(manager->release(handles[k], stream.native).ok());
  }
  // Acquires buffer k read_only and checks its bytes.
  void read(std::size_t k) {
    auto p = manager->acquire(handles[k], stream.native, access_mode::read_only);
    ASSERT_TRUE(p.ok()) << "buffer " << k << ": " << p.error().to_string();
    ASSERT_TRUE(alloc->dev().synchronize_stream(stream).ok());
    EXPECT_EQ(std::memcmp(*p, bytes[k].data(), mib), 0) << "buffer " << k << " lost its bytes";
    ASSERT_TRUE(manager->release(handles[k], stream.native).ok());
  }
  // The first buffer (in order of use) on `t`.
  std::size_t first_on(tier t) {
    for (std::size_t k = 0; k < handles.size(); ++k) {
      if (*manager->where(handles[k]) == t) return k;
    }
    ADD_FAILURE() << "no buffer on that tier";
    return 0;
  }
  // Polls the counters until `done` holds; false after 10 s.
  template <typename Done>
  bool wait_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done(manager->stats())) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(2));
    }
    return true;
  }
  ~setup() {
    for (const auto h : handles) EXPECT_TRUE(manager->unregister(h).ok());
  }
};

TEST(ResidencyWriteBehind, HostBuffersGetAnNvmeCopySoMakingHostRoomWritesNothing) {
  setup s(4 * mib, nullptr);
  ASSERT_TRUE(s.manager);
  s.add(16);  // about 6 on the device, 4 on the host, the rest on NVMe
  ASSERT_TRUE(s.wait_until([](const residency_manager::counters& c) {
    return c.writebacks > 0 && c.nvme_kept_bytes >= c.host_bytes;
  })) << "the host buffers got no NVMe copy";
  const auto before = s.manager->stats();
  EXPECT_EQ(before.writeback_bytes, before.writebacks * mib);
  // Filling a buffer from NVMe makes device room (a spill to the host), and
  // that host room: pushing a host buffer down is a free, not a write.
  s.read(s.first_on(tier::nvme));
  const auto after = s.manager->stats();
  EXPECT_EQ(after.bytes_to_nvme, before.bytes_to_nvme) << "a host buffer was written to NVMe";
  EXPECT_GT(after.clean_spills, before.clean_spills);
  EXPECT_GT(after.spills_to_nvme, before.spills_to_nvme);
  for (std::size_t k = 0; k < s.handles.size(); ++k) s.read(k);
}

TEST(ResidencyWriteBehind, ABufferWrittenDuringItsWriteBehindKeepsItsNewBytes) {
  write_gate gate;
  setup s(8 * mib, &gate);
  ASSERT_TRUE(s.manager);
  gate.shut();
  s.add(12);  // the device holds some, the host the rest: nothing on NVMe
  ASSERT_TRUE(gate.wait_for_background()) << "no write-behind started";
  // The least recently released host buffer is the one being written.
  const std::size_t k = s.first_on(tier::host);
  s.write(k);  // from the host (no NVMe request), new bytes
  gate.open();
  ASSERT_TRUE(s.wait_until([](const residency_manager::counters& c) {
    return c.writebacks_dropped > 0;
  })) << "the stale write-behind was kept";
  // More buffers push everything through NVMe; every byte is the newest.
  s.add(8);
  for (std::size_t i = 0; i < s.handles.size(); ++i) s.read(i);
}

TEST(ResidencyWriteBehind, AFailedWriteBehindLeavesTheBufferOnTheHostAndIsNotRetried) {
  write_gate gate;
  gate.fail_with(-EIO);
  setup s(8 * mib, &gate);
  ASSERT_TRUE(s.manager);
  s.add(12);
  ASSERT_TRUE(s.wait_until([](const residency_manager::counters& c) {
    return c.writebacks_dropped > 0 && c.host_bytes > 0;
  }));
  std::this_thread::sleep_for(milliseconds(100));  // a retry loop would count on
  const auto c = s.manager->stats();
  EXPECT_LE(c.writebacks_dropped, c.host_bytes / mib) << "a failed write-behind was retried";
  EXPECT_EQ(c.writebacks, 0u);
  EXPECT_EQ(c.nvme_bytes + c.nvme_kept_bytes, 0u);
  for (std::size_t k = 0; k < s.handles.size(); ++k) s.read(k);
}

TEST(ResidencyWriteBehind, UnregisterDuringAWriteBehindNeedNotWaitForIt) {
  write_gate gate;
  setup s(8 * mib, &gate);
  ASSERT_TRUE(s.manager);
  gate.shut();
  s.add(12);
  ASSERT_TRUE(gate.wait_for_background());
  const std::size_t k = s.first_on(tier::host);
  EXPECT_TRUE(s.manager->unregister(s.handles[k]).ok());  // returns with the write held
  s.handles.erase(s.handles.begin() + static_cast<std::ptrdiff_t>(k));
  s.bytes.erase(s.bytes.begin() + static_cast<std::ptrdiff_t>(k));
  gate.open();
  ASSERT_TRUE(
      s.wait_until([](const residency_manager::counters& c) { return c.writebacks_dropped > 0; }));
  for (std::size_t i = 0; i < s.handles.size(); ++i) s.read(i);
}

}  // namespace
}  // namespace strata::testing
