#include "strata/nvme_store.hpp"

#include <liburing.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "crc32c.hpp"
#include "nvme_format.hpp"

namespace strata {

using nvme::aligned_block;
using nvme::invalid;
using nvme::why;
using nvme::write_trailer;

namespace {

// The unnamed file: O_TMPFILE, else a created file unlinked at once.
result<int> open_unnamed(const std::string& dir, bool& tmpfile) {
  constexpr int flags = O_RDWR | O_DIRECT | O_CLOEXEC;
  tmpfile = true;
  int fd = ::open(dir.c_str(), O_TMPFILE | flags, 0600);
  if (fd >= 0) return fd;
  int error = errno;
  if (error == ENOENT || error == ENOTDIR) return invalid("no directory " + dir);
  if (error == EOPNOTSUPP || error == EISDIR) {
    tmpfile = false;
    std::string path = dir + "/strata-nvme-XXXXXX";
    fd = mkostemp(path.data(), O_DIRECT | O_CLOEXEC);
    if (fd >= 0) {
      ::unlink(path.c_str());
      return fd;
    }
    error = errno;
  }
  if (error == EINVAL) {
    return invalid(dir + " does not support O_DIRECT (tmpfs?): use a directory on a disk");
  }
  return status{errc::io_error, "nvme store: cannot create a file in " + dir + ": " + why(error)};
}

// The file's direct-I/O alignment, else 4096.
std::size_t direct_io_alignment(int fd) {
  struct statx st {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) == 0 &&
      (st.stx_mask & STATX_DIOALIGN) != 0 && st.stx_dio_offset_align != 0) {
    return std::max<std::size_t>({st.stx_dio_offset_align, st.stx_dio_mem_align, 512});
  }
  return 4096;
}

}  // namespace

result<std::unique_ptr<nvme_store>> nvme_store::open(const tier_options& options,
                                                     io_faults* faults) {
  if (options.nvme_dir.empty()) return invalid("no directory given");
  bool tmpfile = false;
  auto fd = open_unnamed(options.nvme_dir, tmpfile);
  if (!fd) return fd.error();
  const std::size_t block = direct_io_alignment(*fd);
  if (options.nvme_block_size % block != 0) {
    ::close(*fd);
    return invalid("block size " + std::to_string(options.nvme_block_size) +
                   " is not a multiple of the direct-I/O block " + std::to_string(block) + " of " +
                   options.nvme_dir);
  }
  std::unique_ptr<nvme_store> store(new nvme_store(options, *fd, tmpfile, block, faults));
  auto ring = std::make_unique<io_uring>();
  if (int rc = io_uring_queue_init(static_cast<unsigned>(options.nvme_queue_depth), ring.get(), 0);
      rc < 0) {
    return status{errc::io_error,
                  "nvme store: io_uring_queue_init(" + std::to_string(options.nvme_queue_depth) +
                      ") failed: " + why(-rc) + " (io_uring disabled in this environment?)"};
  }
  store->ring_ = std::move(ring);
  return store;
}

std::unique_ptr<nvme_store> nvme_store::open_modeled(const tier_options& options, device& dev) {
  constexpr std::size_t block = 4096;
  std::unique_ptr<nvme_store> store(new nvme_store(options, -1, true, block, nullptr));
  store->modeled_ = &dev;
  return store;
}

status nvme_store::modeled_move(std::size_t bytes) {
  auto now = modeled_->modeled_clock();
  if (!now) return now.error();
  const double rate = options_.nvme_model_gbps * 1e9;
  const double start = std::max(*now, modeled_end_);
  modeled_end_ = start + (rate > 0 ? static_cast<double>(space_.rounded(bytes)) / rate : 0.0);
  return modeled_->advance_modeled_clock(modeled_end_);
}

nvme_store::nvme_store(const tier_options& options, int fd, bool tmpfile, std::size_t block,
                       io_faults* faults)
    : options_(options),
      fd_(fd),
      tmpfile_(tmpfile),
      block_(block),
      faults_(faults),
      space_(block, options.nvme_capacity) {}

nvme_store::~nvme_store() {
  if (ring_ != nullptr) io_uring_queue_exit(ring_.get());
  std::free(bounce_);  // NOLINT(cppcoreguidelines-no-malloc): aligned_alloc'ed
  if (fd_ >= 0) ::close(fd_);
}

unsigned char* nvme_store::bounce(std::size_t slot) {
  if (bounce_ == nullptr) {
    // Needed only for unaligned callers and partial blocks: made on first use.
    bounce_ = static_cast<unsigned char*>(std::aligned_alloc(
        block_, options_.nvme_queue_depth * options_.nvme_block_size));  // NOLINT
    if (bounce_ == nullptr) return nullptr;
  }
  return bounce_ + slot * options_.nvme_block_size;
}

status nvme_store::fail(io_kind kind, std::uint64_t offset, std::size_t length, int result) {
  const std::string what = std::string(kind == io_kind::write ? "write" : "read") + " of " +
                           std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                           " in " + options_.nvme_dir;
  if (result == -ENOSPC) {
    return {errc::out_of_memory, "nvme store: no space left on the device: " + what};
  }
  if (result < 0) return {errc::io_error, "nvme store: " + what + " failed: " + why(-result)};
  return {errc::io_error,
          "nvme store: short " + what + ": " + std::to_string(result) + " bytes moved"};
}

status nvme_store::reserve_file(std::uint64_t end) {
  if (modeled_ != nullptr) return {};  // no file
  if (end <= allocated_) return {};
  std::uint64_t target = std::max<std::uint64_t>(end, allocated_ + grow_step);
  if (options_.nvme_capacity != 0) target = std::min<std::uint64_t>(target, options_.nvme_capacity);
  target = std::max(target, end);
  for (;;) {
    int result = ::fallocate(fd_, 0, static_cast<off_t>(allocated_),
                             static_cast<off_t>(target - allocated_)) == 0
                     ? 0
                     : -errno;
    if (faults_ != nullptr) result = faults_->reserved(allocated_, target - allocated_, result);
    if (result == 0 || result == -EOPNOTSUPP) {  // unsupported: the writes will allocate
      allocated_ = target;
      return {};
    }
    // A disk with less room than a whole step still takes what fits: halve
    // the step, down to the bytes this write needs.
    if (result == -ENOSPC && target > end) {
      target = std::max(end, allocated_ + (target - allocated_) / 2);
      continue;
    }
    const std::string what = "allocating " + std::to_string(target - allocated_) +
                             " bytes at offset " + std::to_string(allocated_) + " in " +
                             options_.nvme_dir;
    if (result == -ENOSPC) {
      return {errc::out_of_memory, "nvme store: no space left on the device: " + what};
    }
    return {errc::io_error, "nvme store: " + what + " failed: " + why(-result)};
  }
}

// One request: a block_size piece of the transfer (the last may be shorter).
struct nvme_store::request {
  std::uint64_t offset = 0;  // in the file
  std::size_t length = 0;    // bytes moved (a logical-block multiple)
  std::size_t user = 0;      // where it starts in the caller's buffer
  std::size_t useful = 0;    // bytes of it that belong to the caller
  unsigned char* buffer = nullptr;
  bool bounced = false;    // through a bounce slot (unaligned, partial, or a sink)
  std::uint32_t slot = 0;  // its bounce slot, if bounced
  bool done = false;       // completed in full
};

struct nvme_store::transfer {
  io_kind kind = io_kind::read;
  unsigned char* user = nullptr;  // null: a sink read
  unsigned char* trailer = nullptr;
  trailer_fields fields;
  std::vector<request> reqs;  // the data requests, then the trailer if any
  std::size_t data_requests = 0;
  std::vector<std::uint32_t> free_slots;
  std::size_t next_submit = 0;
  std::size_t next_check = 0;  // requests before it are checksummed
  std::size_t in_flight = 0;
  std::uint32_t crc = 0;
  status error;
};

nvme_store::transfer nvme_store::plan(io_kind kind, std::uint64_t offset, unsigned char* user,
                                      std::size_t bytes, unsigned char* trailer,
                                      trailer_fields fields) {
  transfer t;
  t.kind = kind;
  t.user = user;
  t.trailer = trailer;
  t.fields = fields;
  const std::size_t span = space_.rounded(bytes);
  const std::size_t bs = options_.nvme_block_size;
  t.data_requests = (span + bs - 1) / bs;
  t.reqs.resize(t.data_requests + (trailer != nullptr ? 1 : 0));
  for (std::size_t i = 0; i < t.data_requests; ++i) {
    request& r = t.reqs[i];
    r.user = i * bs;
    r.offset = offset + r.user;
    r.length = std::min(bs, span - r.user);
    r.useful = std::min(r.length, bytes - r.user);
    r.bounced = user == nullptr || reinterpret_cast<std::uintptr_t>(user + r.user) % block_ != 0 ||
                r.useful != r.length;
    r.buffer = r.bounced ? nullptr : user + r.user;  // a bounce slot at submission
  }
  if (trailer != nullptr) t.reqs.back() = {offset + span, block_, 0, 0, trailer, false, 0, false};
  t.free_slots.resize(options_.nvme_queue_depth);
  for (std::uint32_t s = 0; s < options_.nvme_queue_depth; ++s) t.free_slots[s] = s;
  return t;
}

bool nvme_store::submit(transfer& t) {
  unsigned queued = 0;
  // A sink read holds each slot until its bytes are checked, in order.
  while (t.error.ok() && t.next_submit < t.reqs.size() && t.in_flight < options_.nvme_queue_depth &&
         !t.free_slots.empty()) {
    const std::size_t i = t.next_submit;
    request& r = t.reqs[i];
    if (i == t.data_requests) {  // the trailer, after every data request is checked
      write_trailer(t.trailer, block_, t.fields.id, t.fields.bytes, t.crc);
    }
    if (r.bounced) {
      r.slot = t.free_slots.back();
      r.buffer = bounce(r.slot);
      if (r.buffer == nullptr) {
        t.error = {errc::out_of_memory, "nvme store: no host memory for bounce buffers"};
        break;
      }
      t.free_slots.pop_back();
    }
    if (t.kind == io_kind::write && i < t.data_requests) {
      if (r.bounced) {
        std::memcpy(r.buffer, t.user + r.user, r.useful);
        std::memset(r.buffer + r.useful, 0, r.length - r.useful);
      }
      t.crc = crc32c(t.crc, t.user + r.user, r.useful);  // in order, before the bytes leave
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (t.kind == io_kind::write) {
      io_uring_prep_write(sqe, fd_, r.buffer, static_cast<unsigned>(r.length), r.offset);
    } else {
      io_uring_prep_read(sqe, fd_, r.buffer, static_cast<unsigned>(r.length), r.offset);
    }
    io_uring_sqe_set_data64(sqe, i);
    ++t.next_submit;
    ++t.in_flight;
    ++queued;
  }
  if (queued == 0) return false;
  if (int rc = io_uring_submit(ring_.get()); rc < 0) {
    // This round never reached the disk; what went before is still reaped.
    // Its entries stay queued in the ring, so the ring is done.
    t.in_flight -= queued;
    ring_failure_ = "io_uring_submit failed: " + why(-rc);
    if (t.error.ok()) t.error = {errc::io_error, "nvme store: " + ring_failure_};
    return false;
  }
  return true;
}

bool nvme_store::complete(transfer& t) {
  io_uring_cqe* cqe = nullptr;
  int rc = 0;
  do {
    rc = io_uring_wait_cqe(ring_.get(), &cqe);
  } while (rc == -EINTR);
  if (rc < 0) {
    // Requests in flight cannot be reaped; the ring is done (its teardown
    // in the destructor waits for them).
    ring_failure_ = "io_uring_wait_cqe failed: " + why(-rc);
    t.error = {errc::io_error, "nvme store: " + ring_failure_};
    return false;
  }
  const auto i = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
  int result = cqe->res;
  io_uring_cqe_seen(ring_.get(), cqe);
  --t.in_flight;
  request& r = t.reqs[i];
  if (faults_ != nullptr) result = faults_->complete(t.kind, r.offset, r.buffer, r.length, result);
  const bool sink = t.user == nullptr;
  if (result != static_cast<int>(r.length)) {
    if (t.error.ok()) t.error = fail(t.kind, r.offset, r.length, result);
  } else if (t.kind == io_kind::read) {
    if (r.bounced && !sink) std::memcpy(t.user + r.user, r.buffer, r.useful);
    r.done = true;
    while (t.next_check < t.next_submit && t.reqs[t.next_check].done) {
      const request& c = t.reqs[t.next_check];
      t.crc = crc32c(t.crc, sink ? c.buffer : t.user + c.user, c.useful);
      if (sink) t.free_slots.push_back(c.slot);
      ++t.next_check;
    }
    if (sink) return true;  // its slot went back once checked
  }
  if (r.bounced) t.free_slots.push_back(r.slot);
  return true;
}

status nvme_store::move(io_kind kind, std::uint64_t offset, unsigned char* user, std::size_t bytes,
                        std::uint32_t& crc, unsigned char* trailer, trailer_fields fields) {
  if (modeled_ != nullptr) return modeled_move(bytes + (trailer != nullptr ? block_ : 0));
  if (!ring_failure_.empty()) {
    return {errc::io_error,
            "nvme store: its io_uring failed earlier (" + ring_failure_ + "); open a new store"};
  }
  transfer t = plan(kind, offset, user, bytes, trailer, fields);
  t.crc = crc;  // a running checksum: parts of one extent continue it
  while (t.in_flight > 0 || (t.error.ok() && t.next_submit < t.reqs.size())) {
    (void)submit(t);
    if (t.in_flight == 0) {  // an error stopped the submissions before any went out
      if (t.error.ok()) t.error = {errc::io_error, "nvme store: no request could be submitted"};
      break;
    }
    if (!complete(t)) break;
  }
  crc = t.crc;
  return std::move(t.error);
}

status nvme_store::mismatch(std::uint64_t id, const extent& e, std::uint32_t read_crc,
                            const char* what) {
  char text[200];
  std::snprintf(text, sizeof text,
                "extent %llu (%zu bytes at offset %llu) %s: stored crc32c 0x%08x, read 0x%08x",
                static_cast<unsigned long long>(id), e.bytes,
                static_cast<unsigned long long>(e.offset), what, e.crc, read_crc);
  return {errc::io_error, "nvme store in " + options_.nvme_dir + ": " + text};
}

status nvme_store::verify(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = extents_.find(id);
  if (it == extents_.end()) return invalid("no extent " + std::to_string(id));
  const extent e = it->second;
  if (modeled_ != nullptr) return modeled_move(e.span);  // the read back, nothing to compare
  if (bounce(0) == nullptr) {
    return {errc::out_of_memory, "nvme store: no host memory for bounce buffers"};
  }
  // A sink read: the bytes pass through the bounce buffers, checksummed in
  // order, and go nowhere. Then the trailer, block for block.
  std::uint32_t crc = 0;
  status st = move(io_kind::read, e.offset, nullptr, e.bytes, crc);
  if (st && crc != e.crc) st = mismatch(id, e, crc, "does not read back as written");
  std::vector<unsigned char> read_storage(2 * block_);
  std::vector<unsigned char> expected(block_);
  unsigned char* trailer = aligned_block(read_storage, block_);
  std::uint32_t trailer_crc = 0;
  if (st) st = move(io_kind::read, e.offset + e.span - block_, trailer, block_, trailer_crc);
  if (st) {
    write_trailer(expected.data(), block_, id, e.bytes, e.crc);
    if (std::memcmp(trailer, expected.data(), block_) != 0) {
      std::uint32_t stored = 0;
      std::memcpy(&stored, trailer + 24, sizeof stored);
      st = mismatch(id, e, stored, "has a trailer that does not read back as written");
    }
  }
  if (!st) ++stats_.failed;
  return st;
}

status nvme_store::erase(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = extents_.find(id);
  if (it == extents_.end()) return invalid("no extent " + std::to_string(id));
  space_.give(it->second.offset, it->second.span);
  --stats_.extents;
  stats_.stored_bytes -= it->second.bytes;
  extents_.erase(it);
  return {};
}

nvme_store::counters nvme_store::stats() {
  std::lock_guard lock(mu_);
  counters c = stats_;
  c.file_bytes = space_.end();
  c.space_bytes = space_.used();
  return c;
}

}  // namespace strata
