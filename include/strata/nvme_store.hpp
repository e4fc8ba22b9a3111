// The NVMe tier: buffers kept in one unnamed file in a configured directory,
// written and read with O_DIRECT through io_uring (liburing), several
// requests in flight, completions reaped by the calling thread (no thread
// per request). Every extent carries a CRC-32C of its bytes, written with
// the data (a trailer block after it) and checked on every read: a mismatch
// is an io_error naming the extent, never silent corruption.
//
// Layout: an extent is its bytes rounded up to the logical block size (the
// direct-I/O alignment the file system reports, else 4096), then one
// trailer block {"STRATAX1", extent id, bytes, crc32c}. File space comes
// from an extent_space (first fit, merged on erase); an extent of
// block_size bytes or more starts at a multiple of block_size, so its
// requests line up with the disk's larger units. The file is opened
// O_TMPFILE (mode 0600), or created and unlinked at once where the file
// system refuses O_TMPFILE, so nothing is left behind, even after a crash.
//
// Failures: EIO and short transfers are io_error, ENOSPC and the configured
// capacity are out_of_memory; each message names the directory, the
// request's offset and length. A failed write frees its extent and leaves
// the caller's bytes where they were; a failed read leaves the extent
// stored. If the ring itself fails (io_uring_submit or io_uring_wait_cqe
// returns an error), every later operation is an io_error saying so.
//
// Thread safety: every member may be called concurrently; operations run
// one at a time (one ring, one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/extent_space.hpp"
#include "strata/tier_options.hpp"

struct io_uring;  // liburing's ring; only nvme_store.cpp needs its layout

namespace strata {

enum class io_kind : std::uint8_t { read, write };

/// Sees every completed request before the store does. Tests use it to
/// inject EIO, ENOSPC, short transfers and corrupted reads.
class STRATA_API io_faults {
 public:
  io_faults() = default;
  io_faults(const io_faults&) = delete;
  io_faults& operator=(const io_faults&) = delete;
  io_faults(io_faults&&) = delete;
  io_faults& operator=(io_faults&&) = delete;
  virtual ~io_faults() = default;
  /// Returns the result the store sees: `result` as the kernel gave it
  /// (bytes moved, or -errno) or another; may change a read's bytes in
  /// [buffer, buffer + length). Called from the thread running the store's
  /// operation.
  virtual int complete(io_kind kind, std::uint64_t offset, void* buffer, std::size_t length,
                       int result) = 0;
  /// Returns the result the store sees for allocating file bytes
  /// [offset, offset + length) ahead of writes (0, or -errno such as
  /// -ENOSPC to model a small disk); `result` is what fallocate gave. Called
  /// from the thread running the store's operation.
  virtual int reserved(std::uint64_t /*offset*/, std::uint64_t /*length*/, int result) {
    return result;
  }
};

class STRATA_API nvme_store {
 public:
  /// Opens the unnamed file in `options.nvme_dir` and the ring, sized by the
  /// nvme_* options, which must be in their table ranges
  /// (check_tier_options). Errors: invalid_argument (no directory, no
  /// such directory, no O_DIRECT there, e.g. tmpfs, a block size that is not
  /// a multiple of its direct-I/O block), io_error (the ring or the file could not be set up).
  /// `faults`, if given, must outlive the store.
  static result<std::unique_ptr<nvme_store>> open(const tier_options& options,
                                                  io_faults* faults = nullptr);
  /// A modeled store for a timing-only device (offload option
  /// nvme_model): extents are accounted as in a file, no byte is read or
  /// written (checksums are not computed: there is nothing to check), and
  /// each request takes its bytes (rounded up to blocks, the trailer too)
  /// at options.nvme_model_gbps: it starts at the later of the calling
  /// thread's modeled clock and the end of the request before it (one at a
  /// time), and moves the caller's clock to its end (device::
  /// advance_modeled_clock). `dev` must outlive the store.
  static std::unique_ptr<nvme_store> open_modeled(const tier_options& options, device& dev);
  nvme_store(const nvme_store&) = delete;
  nvme_store& operator=(const nvme_store&) = delete;
  nvme_store(nvme_store&&) = delete;
  nvme_store& operator=(nvme_store&&) = delete;
  ~nvme_store();

  /// Stores `bytes` (> 0) bytes from `src` (any alignment; block-aligned
  /// memory is written without a copy) and returns the extent's id once
  /// they are on the file with their checksum. Errors: see the header.
  result<std::uint64_t> write(const void* src, std::size_t bytes);
  /// Reads extent `id` into `dst` (`bytes` must be its size) and checks its
  /// checksum. Errors: invalid_argument (unknown id, wrong size), io_error.
  status read(std::uint64_t id, void* dst, std::size_t bytes);
  /// The same in parts, for callers that stream an extent through a small
  /// buffer: begin_write reserves an extent of `bytes` (errors as write's)
  /// and returns its id; write_part appends the next `bytes` of it (every
  /// part but the last a multiple of logical_block()); the part that
  /// completes it also writes the trailer, and the extent is then stored.
  /// A failed part frees the extent; abandon_write frees one not finished.
  /// Errors: invalid_argument (no such extent being written, a part too
  /// long or misaligned), and write's.
  result<std::uint64_t> begin_write(std::size_t bytes);
  status write_part(std::uint64_t id, const void* src, std::size_t bytes);
  status abandon_write(std::uint64_t id);
  /// Reads `bytes` of extent `id` from `offset` (a multiple of
  /// logical_block()) into `dst`, continuing the running checksum `crc`
  /// (0 before the first part; parts in order). Once every byte has been
  /// read, check_read(id, crc) says whether they match the checksum
  /// written with them (io_error naming the extent if not). Errors:
  /// invalid_argument (unknown id, a range outside the extent), io_error.
  status read_part(std::uint64_t id, std::size_t offset, void* dst, std::size_t bytes,
                   std::uint32_t& crc);
  status check_read(std::uint64_t id, std::uint32_t crc);
  /// Reads extent `id` and its trailer back from the disk through the
  /// store's own buffers and checks them against the checksum and the id
  /// recorded at write(): what a caller runs before it drops its own copy.
  /// Costs one read of the extent, pipelined as read() is. Errors:
  /// invalid_argument (unknown id), io_error (a failed read, a mismatch,
  /// naming the extent), out_of_memory (no host memory for the buffers).
  status verify(std::uint64_t id);
  /// Frees extent `id`. Errors: invalid_argument for an unknown id.
  status erase(std::uint64_t id);

  struct counters {
    std::uint64_t extents = 0;        ///< stored now
    std::uint64_t stored_bytes = 0;   ///< their bytes
    std::uint64_t file_bytes = 0;     ///< the file's size
    std::uint64_t bytes_written = 0;  ///< through write() and write_part(), ever
    std::uint64_t bytes_read = 0;     ///< through read() and read_part(), ever
    std::uint64_t failed = 0;         ///< write() and read() calls that failed
    /// File space held by stored extents and writes under way (what
    /// nvme_capacity limits).
    std::uint64_t space_bytes = 0;
  };
  [[nodiscard]] counters stats();
  /// The direct-I/O alignment of the file (bytes).
  [[nodiscard]] std::size_t logical_block() const noexcept { return block_; }
  /// The file space an extent of `bytes` takes: its data rounded up to
  /// whole blocks, and the trailer block.
  [[nodiscard]] std::uint64_t span_of(std::size_t bytes) const noexcept {
    return space_.rounded(bytes) + block_;
  }
  /// Whether the store is a modeled one (open_modeled).
  [[nodiscard]] bool modeled() const noexcept { return modeled_ != nullptr; }
  /// False when the file system refused O_TMPFILE (create-and-unlink used).
  [[nodiscard]] bool unnamed_from_the_start() const noexcept { return tmpfile_; }

 private:
  struct extent {
    std::uint64_t offset;
    std::size_t bytes;
    std::uint64_t span;  // data rounded up + the trailer block
    std::uint32_t crc;
  };
  // One transfer under way: its requests and how far each has got.
  struct transfer;
  struct request;
  // What a write's trailer names: the extent's id and size (the crc is the
  // transfer's own, complete when the trailer is filled).
  struct trailer_fields {
    std::uint64_t id;
    std::uint64_t bytes;
  };

  nvme_store(const tier_options& options, int fd, bool tmpfile, std::size_t block,
             io_faults* faults);
  // Moves [offset, offset + rounded(bytes)) of the file to or from `user`
  // in requests of block_size, queue_depth at a time, checksumming the
  // user's bytes in order (crc32c continuing the running value in `crc`:
  // writes before they leave, reads once they are in). A write may end with `trailer` (one logical
  // block) filled from `fields` once every data request is submitted, in
  // the same pipeline. A read with a null `user` is a sink: every request
  // goes through a bounce buffer, held until it is checksummed. Needs mu_.
  status move(io_kind kind, std::uint64_t offset, unsigned char* user, std::size_t bytes,
              std::uint32_t& crc, unsigned char* trailer = nullptr, trailer_fields fields = {});
  // The three stages of move(): the requests and their buffers' kind...
  transfer plan(io_kind kind, std::uint64_t offset, unsigned char* user, std::size_t bytes,
                unsigned char* trailer, trailer_fields fields);
  // ...queueing the next requests while queue depth and bounce slots
  // allow, and submitting them (true if any went out)...
  bool submit(transfer& t);
  // ...and reaping one completion. False when the ring failed: what is in
  // flight cannot be reaped, and the transfer stops.
  bool complete(transfer& t);
  status fail(io_kind kind, std::uint64_t offset, std::size_t length, int result);
  // Allocates file blocks up to `end` ahead of the writes (as fio does), so
  // writes do not wait for the file system to allocate; grows in steps of
  // grow_step, halved on ENOSPC down to what the write needs (a small disk
  // is used to its end). ENOSPC for that is out_of_memory, before any data
  // moves.
  status reserve_file(std::uint64_t end);
  static constexpr std::uint64_t grow_step = 256ULL << 20;
  unsigned char* bounce(std::size_t slot);
  status mismatch(std::uint64_t id, const extent& e, std::uint32_t read_crc, const char* what);

  // A modeled store's request of `bytes`: its time (see open_modeled).
  // Needs mu_.
  status modeled_move(std::size_t bytes);

  tier_options options_;
  device* modeled_ = nullptr;  // a modeled store's device
  double modeled_end_ = 0;     // when its last request ends (modeled seconds)
  int fd_;
  bool tmpfile_;
  std::size_t block_;
  io_faults* faults_;
  std::mutex mu_;
  std::unique_ptr<io_uring> ring_;  // set once io_uring_queue_init succeeded
  std::string ring_failure_;        // set when the ring itself failed: no more I/O
  extent_space space_;
  std::uint64_t allocated_ = 0;  // file bytes fallocate'd
  std::unordered_map<std::uint64_t, extent> extents_;
  // Extents begun with begin_write and not finished.
  struct partial_write {
    extent e;  // its crc: the running checksum of what was written
    std::size_t written;
  };
  std::unordered_map<std::uint64_t, partial_write> writing_;
  std::uint64_t next_id_ = 1;
  counters stats_;
  unsigned char* bounce_ = nullptr;  // queue_depth aligned buffers of block_size
};

}  // namespace strata
