// The NVMe store: round trips at every alignment, space reuse, the unnamed
// file, the configured limits, and injected faults (EIO, ENOSPC, short
// transfers, corrupted reads) that lose no byte and name what failed. Runs
// in a scratch directory of the build tree; skips, saying why, where that
// file system has no O_DIRECT.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "crc32c.hpp"
#include "strata/nvme_store.hpp"

namespace strata::testing {
namespace {

std::string scratch() {
  std::string dir = std::string(STRATA_TEST_SCRATCH_DIR) + "/nvme";
  ::mkdir(STRATA_TEST_SCRATCH_DIR, 0700);
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

tier_options opts(std::size_t block_size = 1 << 20, unsigned queue_depth = 32,
                  std::uint64_t capacity = 0) {
  tier_options o;
  o.nvme_dir = scratch();
  o.nvme_block_size = block_size;
  o.nvme_queue_depth = queue_depth;
  o.nvme_capacity = capacity;
  return o;
}

// Opens a store, or skips the test when the directory cannot do O_DIRECT.
std::unique_ptr<nvme_store> open_store(const tier_options& o, io_faults* faults = nullptr) {
  auto s = nvme_store::open(o, faults);
  if (!s && s.error().message().find("O_DIRECT") != std::string::npos) return nullptr;
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return s ? std::move(*s) : nullptr;
}

#define OPEN_OR_SKIP(name, ...)                                             \
  auto name = open_store(__VA_ARGS__);                                      \
  if (!name) GTEST_SKIP() << "no O_DIRECT in " << scratch() << ": skipped"; \
  static_assert(true)

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  const auto data = pattern(1000, 1);
  EXPECT_EQ(crc32c(crc32c(0, data.data(), 300), data.data() + 300, 700),
            crc32c(0, data.data(), 1000))
      << "extending must equal one pass";
}

TEST(Crc32c, LongBuffersMatchByteAtATime) {
  // Buffers of 24 KiB and more go through three interleaved stripes that
  // are combined; a byte at a time never does: the two must agree at the
  // stripes' edges, with any leftover, from any alignment.
  const auto data = pattern((3 << 16) + 64, 7);
  for (const std::size_t size : {std::size_t{24575}, std::size_t{24576}, std::size_t{24577},
                                 std::size_t{24583}, std::size_t{49152}, std::size_t{3 << 16}}) {
    for (const std::size_t offset : {0, 1, 5, 8}) {
      std::uint32_t one_by_one = 0;
      for (std::size_t i = 0; i < size; ++i) one_by_one = crc32c(one_by_one, &data[offset + i], 1);
      EXPECT_EQ(crc32c(0, data.data() + offset, size), one_by_one)
          << size << " bytes at offset " << offset;
    }
  }
}

TEST(NvmeStore, RoundTripsAtEveryAlignmentAndSize) {
  OPEN_OR_SKIP(store, opts(64 << 10, 4));
  const std::size_t block = store->logical_block();
  EXPECT_TRUE(store->unnamed_from_the_start()) << "ext4 has O_TMPFILE";
  const std::size_t sizes[] = {1, block - 1, block, block + 1, (64 << 10) * 3 + 17, 1 << 20};
  unsigned seed = 1;
  for (const std::size_t n : sizes) {
    for (const std::size_t misalign : {std::size_t{0}, std::size_t{3}}) {
      SCOPED_TRACE("size " + std::to_string(n) + ", offset " + std::to_string(misalign));
      auto* raw = static_cast<unsigned char*>(
          std::aligned_alloc(block, (n + misalign + 2 * block - 1) / block * block));
      const auto data = pattern(n, ++seed);
      std::memcpy(raw + misalign, data.data(), n);
      auto id = store->write(raw + misalign, n);
      ASSERT_TRUE(id.ok()) << id.error().to_string();
      std::memset(raw, 0, n + misalign);
      ASSERT_TRUE(store->read(*id, raw + misalign, n).ok());
      EXPECT_EQ(std::memcmp(raw + misalign, data.data(), n), 0) << "bytes changed";
      EXPECT_FALSE(store->read(*id, raw, n + 1).ok()) << "a wrong size was accepted";
      ASSERT_TRUE(store->erase(*id).ok());
      EXPECT_EQ(store->erase(*id).code(), errc::invalid_argument);
      std::free(raw);
    }
  }
  EXPECT_EQ(store->stats().extents, 0u);
}

// An extent written and read in parts is the same extent: one checksum over
// all parts, readable whole, verifiable; bad parts are refused.
TEST(NvmeStore, ExtentsStreamInAndOutInParts) {
  OPEN_OR_SKIP(store, opts(64 << 10, 4));
  const std::size_t block = store->logical_block();
  const std::size_t part = 3 * block;
  const std::size_t n = 4 * part + 123;  // a short last part
  const auto data = pattern(n, 77);
  auto id = store->begin_write(n);
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  EXPECT_EQ(store->write_part(*id, data.data(), block + 1).code(), errc::invalid_argument)
      << "a part before the last must be whole blocks";
  std::vector<unsigned char> early(n);
  EXPECT_EQ(store->read(*id, early.data(), n).code(), errc::invalid_argument)
      << "an extent still being written cannot be read";
  for (std::size_t at = 0; at < n; at += part) {
    ASSERT_TRUE(store->write_part(*id, data.data() + at, std::min(part, n - at)).ok()) << at;
  }
  EXPECT_EQ(store->write_part(*id, data.data(), 1).code(), errc::invalid_argument)
      << "the extent is complete";
  ASSERT_TRUE(store->verify(*id).ok()) << "one checksum and trailer over every part";
  std::vector<unsigned char> whole(n);
  ASSERT_TRUE(store->read(*id, whole.data(), n).ok());
  EXPECT_EQ(whole, data);
  std::vector<unsigned char> parts(n);
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < n; at += 2 * block) {
    ASSERT_TRUE(
        store->read_part(*id, at, parts.data() + at, std::min(2 * block, n - at), crc).ok());
  }
  EXPECT_TRUE(store->check_read(*id, crc).ok());
  EXPECT_EQ(parts, data);
  EXPECT_EQ(store->check_read(*id, crc ^ 1).code(), errc::io_error);
  EXPECT_EQ(store->read_part(*id, 1, parts.data(), 10, crc).code(), errc::invalid_argument)
      << "an offset off a block";
  ASSERT_TRUE(store->erase(*id).ok());
  // An extent abandoned half-written gives its space back.
  auto half = store->begin_write(n);
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(store->write_part(*half, data.data(), part).ok());
  ASSERT_TRUE(store->abandon_write(*half).ok());
  EXPECT_EQ(store->abandon_write(*half).code(), errc::invalid_argument);
  EXPECT_EQ(store->stats().extents, 0u);
}

TEST(NvmeStore, ErasedSpaceIsReusedAndTheFileHasNoName) {
  const std::string dir = scratch();
  const auto entries = [&] {
    std::size_t n = 0;
    DIR* d = ::opendir(dir.c_str());
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
    ::closedir(d);
    return n;
  };
  const std::size_t before = entries();
  OPEN_OR_SKIP(store, opts());
  EXPECT_EQ(entries(), before) << "the store's file must not appear in the directory";
  const auto data = pattern(3 << 20, 7);
  auto a = store->write(data.data(), data.size());
  auto b = store->write(data.data(), data.size());
  ASSERT_TRUE(a.ok() && b.ok());
  const std::uint64_t size = store->stats().file_bytes;
  ASSERT_TRUE(store->erase(*a).ok());
  auto c = store->write(data.data(), data.size());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(store->stats().file_bytes, size) << "the erased extent's space was not reused";
  EXPECT_EQ(store->stats().stored_bytes, 2 * data.size());
}

// Records the offset and length of every completed write.
class write_log : public io_faults {
 public:
  int complete(io_kind kind, std::uint64_t offset, void* /*buffer*/, std::size_t length,
               int result) override {
    if (kind == io_kind::write) writes.emplace_back(offset, length);
    return result;
  }
  std::vector<std::pair<std::uint64_t, std::size_t>> writes;
};

TEST(NvmeStore, LargeExtentsStartOnARequestBoundary) {
  write_log log;
  OPEN_OR_SKIP(store, opts(1 << 20), &log);
  const auto small = pattern(5000, 1);
  const auto large = pattern((2 << 20) + 100, 2);
  ASSERT_TRUE(store->write(small.data(), small.size()).ok());
  const std::size_t after_small = log.writes.size();
  auto id = store->write(large.data(), large.size());
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(log.writes.size() - after_small, 4u) << "3 data requests and the trailer";
  std::uint64_t first = UINT64_MAX;
  for (std::size_t i = after_small; i < log.writes.size(); ++i) {
    first = std::min(first, log.writes[i].first);
  }
  EXPECT_EQ(first % (1 << 20), 0u) << "the large extent starts on a 1 MiB request boundary";
  ASSERT_TRUE(store->write(small.data(), small.size()).ok());
  EXPECT_LT(log.writes.back().first, first) << "a small extent fills the gap left before it";
  std::vector<unsigned char> back(large.size());
  ASSERT_TRUE(store->read(*id, back.data(), back.size()).ok());
  EXPECT_EQ(back, large);
}

TEST(NvmeStore, BadOptionsAreClearErrors) {
  tier_options o;
  EXPECT_EQ(nvme_store::open(o).code(), errc::invalid_argument);
  o.nvme_dir = "/no/such/directory";
  auto missing = nvme_store::open(o);
  EXPECT_EQ(missing.code(), errc::invalid_argument);
  EXPECT_NE(missing.error().message().find("/no/such/directory"), std::string::npos);
  o.nvme_dir = scratch();
  o.nvme_block_size = 1000;
  auto odd = nvme_store::open(o);
  if (odd.ok()) GTEST_SKIP() << "unexpected: 1000-byte blocks accepted";
  EXPECT_EQ(odd.code(), errc::invalid_argument);
}

TEST(NvmeStore, CapacityIsOutOfMemory) {
  OPEN_OR_SKIP(store, opts(1 << 20, 32, 4 << 20));
  const auto data = pattern(3 << 20, 3);
  ASSERT_TRUE(store->write(data.data(), data.size()).ok());
  auto full = store->write(data.data(), data.size());
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.code(), errc::out_of_memory);
  EXPECT_NE(full.error().message().find("capacity"), std::string::npos);
}

// A disk of `bytes`: allocating file space past it is ENOSPC.
class small_disk : public io_faults {
 public:
  explicit small_disk(std::uint64_t bytes) : bytes_(bytes) {}
  int complete(io_kind /*kind*/, std::uint64_t /*offset*/, void* /*buffer*/, std::size_t /*length*/,
               int result) override {
    return result;
  }
  int reserved(std::uint64_t offset, std::uint64_t length, int result) override {
    return offset + length > bytes_ ? -ENOSPC : result;
  }

 private:
  std::uint64_t bytes_;
};

// The file grows in 256 MiB steps; a disk with less room than a step is
// still used to its end (an 8 MiB disk took no 2 MiB spill, a 400 MiB one
// stopped at 256 MiB).
TEST(NvmeStore, ASmallDiskIsUsedToItsEnd) {
  small_disk eight(8 << 20);
  OPEN_OR_SKIP(store, opts(1 << 20, 4), &eight);
  const auto two = pattern(2 << 20, 5);
  std::vector<std::uint64_t> ids;
  status full;
  for (int i = 0; i < 8 && full.ok(); ++i) {
    auto id = store->write(two.data(), two.size());
    if (id) ids.push_back(*id);
    if (!id) full = id.error();
  }
  // Each spill takes its 2 MiB, a trailer, and starts on a 1 MiB request
  // boundary: 3 MiB of file, so two fit 8 MiB and the third does not.
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(full.code(), errc::out_of_memory);
  EXPECT_NE(full.message().find("no space left"), std::string::npos) << full.message();
  ASSERT_FALSE(ids.empty());
  std::vector<unsigned char> back(two.size());
  ASSERT_TRUE(store->read(ids.back(), back.data(), back.size()).ok());
  EXPECT_EQ(back, two);
}

TEST(NvmeStore, A400MiBDiskTakesMoreThanOneStep) {
  small_disk disk(400ULL << 20);
  OPEN_OR_SKIP(store, opts(1 << 20, 4), &disk);
  const auto data = pattern(16 << 20, 6);
  std::uint64_t written = 0;
  for (;;) {
    auto id = store->write(data.data(), data.size());
    if (!id) {
      EXPECT_EQ(id.code(), errc::out_of_memory) << id.error().to_string();
      break;
    }
    written += data.size();
    ASSERT_LE(written, 400ULL << 20);
  }
  // Each 16 MiB extent takes 17 MiB of file (a trailer, then the next
  // request boundary): 23 fit 400 MiB.
  EXPECT_EQ(written, 23ULL * (16 << 20)) << "the disk past the first 256 MiB step was used";
}

// Makes the `nth` completion of `kind` (1 = the first from now) report
// `result`, or flips a byte of it when `result` is 0.
class one_fault : public io_faults {
 public:
  one_fault(io_kind kind, int nth, int result) : kind_(kind), left_(nth), result_(result) {}
  int complete(io_kind kind, std::uint64_t /*offset*/, void* buffer, std::size_t length,
               int result) override {
    if (kind != kind_ || left_ <= 0 || --left_ > 0) return result;
    if (result_ != 0) return result_;
    static_cast<unsigned char*>(buffer)[length / 2] ^= 0x40;
    return result;
  }

 private:
  io_kind kind_;
  int left_;
  int result_;
};

TEST(NvmeStore, FailedWritesLoseNothingAndSayWhy) {
  struct failing {
    int result;
    errc code;
    const char* says;
  };
  for (const failing f : {failing{-EIO, errc::io_error, "Input/output error"},
                          failing{-ENOSPC, errc::out_of_memory, "no space left"},
                          failing{4096, errc::io_error, "short write"}}) {
    SCOPED_TRACE(f.says);
    one_fault fault(io_kind::write, 2, f.result);
    OPEN_OR_SKIP(store, opts(64 << 10, 2), &fault);
    const auto data = pattern(1 << 20, 5);
    const std::vector<unsigned char> copy(
        data.begin(), data.end());  // NOLINT(performance-unnecessary-copy-initialization):
                                    // compared after the failure
    auto id = store->write(data.data(), data.size());
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.code(), f.code);
    EXPECT_NE(id.error().message().find(f.says), std::string::npos) << id.error().message();
    EXPECT_NE(id.error().message().find("offset"), std::string::npos) << id.error().message();
    EXPECT_EQ(data, copy) << "a failed write touched the caller's bytes";
    EXPECT_EQ(store->stats().extents, 0u);
    EXPECT_EQ(store->stats().failed, 1u);
    auto again = store->write(data.data(), data.size());  // the fault fired once
    ASSERT_TRUE(again.ok()) << again.error().to_string();
    std::vector<unsigned char> back(data.size());
    ASSERT_TRUE(store->read(*again, back.data(), back.size()).ok());
    EXPECT_EQ(back, data);
  }
}

TEST(NvmeStore, CorruptedAndFailedReadsAreErrorsNamingTheExtent) {
  for (const int result : {0, -EIO}) {
    SCOPED_TRACE(result == 0 ? "a flipped bit" : "EIO");
    one_fault fault(io_kind::read, 3, result);
    OPEN_OR_SKIP(store, opts(64 << 10, 4), &fault);
    const auto data = pattern(1 << 20, 9);
    auto id = store->write(data.data(), data.size());
    ASSERT_TRUE(id.ok());
    std::vector<unsigned char> back(data.size());
    const status st = store->read(*id, back.data(), back.size());
    ASSERT_FALSE(st.ok()) << "corruption went unnoticed";
    EXPECT_EQ(st.code(), errc::io_error);
    const std::string says = result == 0 ? "extent " + std::to_string(*id) : "failed";
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
    ASSERT_TRUE(store->read(*id, back.data(), back.size()).ok()) << "the extent was lost";
    EXPECT_EQ(back, data);
  }
}

TEST(NvmeStore, VerifyReadsTheExtentBackAndNamesAMismatch) {
  // 3 MiB + 100 bytes in 1 MiB requests: 4 data reads, then the trailer's.
  one_fault data_flip(io_kind::read, 2, 0);
  OPEN_OR_SKIP(store, opts(1 << 20, 2), &data_flip);
  const auto data = pattern((3 << 20) + 100, 11);
  auto id = store->write(data.data(), data.size());
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  const status flipped = store->verify(*id);
  EXPECT_EQ(flipped.code(), errc::io_error);
  EXPECT_NE(flipped.message().find("extent " + std::to_string(*id)), std::string::npos);
  EXPECT_NE(flipped.message().find("does not read back as written"), std::string::npos)
      << flipped.message();
  EXPECT_TRUE(store->verify(*id).ok()) << "the disk holds the right bytes: the fault fired once";
  std::vector<unsigned char> back(data.size());
  ASSERT_TRUE(store->read(*id, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(store->verify(*id + 99).code(), errc::invalid_argument);
}

TEST(NvmeStore, VerifyChecksTheTrailerAndFailedReads) {
  one_fault trailer_flip(io_kind::read, 5, 0);
  OPEN_OR_SKIP(store, opts(1 << 20, 2), &trailer_flip);
  const auto data = pattern((3 << 20) + 100, 12);
  auto id = store->write(data.data(), data.size());
  ASSERT_TRUE(id.ok());
  const status st = store->verify(*id);
  EXPECT_EQ(st.code(), errc::io_error);
  EXPECT_NE(st.message().find("trailer"), std::string::npos) << st.message();
  one_fault eio(io_kind::read, 1, -EIO);
  OPEN_OR_SKIP(other, opts(1 << 20, 2), &eio);
  auto id2 = other->write(data.data(), data.size());
  ASSERT_TRUE(id2.ok());
  const status failed = other->verify(*id2);
  EXPECT_EQ(failed.code(), errc::io_error);
  EXPECT_NE(failed.message().find("read of"), std::string::npos) << failed.message();
  EXPECT_EQ(other->stats().failed, 1u);
}

TEST(NvmeStore, RandomizedConcurrentUseKeepsEveryByte) {
  OPEN_OR_SKIP(store, opts(128 << 10, 8));
  constexpr unsigned seed = 20261122;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + t);
      std::vector<std::pair<std::uint64_t, std::vector<unsigned char>>> held;
      for (int op = 0; op < 60; ++op) {
        if (held.empty() || rng() % 3 != 0) {
          auto data = pattern(1 + rng() % (700 << 10), rng());
          auto id = store->write(data.data(), data.size());
          if (!id) {
            ++failures;
            continue;
          }
          held.emplace_back(*id, std::move(data));
        } else {
          const std::size_t k = rng() % held.size();
          std::vector<unsigned char> back(held[k].second.size());
          if (!store->read(held[k].first, back.data(), back.size()) || back != held[k].second) {
            ++failures;
          }
          if (!store->erase(held[k].first)) ++failures;
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (auto& [id, data] : held) {
        std::vector<unsigned char> back(data.size());
        if (!store->read(id, back.data(), back.size()) || back != data) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace strata::testing
