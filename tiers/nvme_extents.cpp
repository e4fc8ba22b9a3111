// The NVMe store's extents: written whole or in parts (one running
// checksum, the trailer with the last part), read whole or in parts (the
// checksum compared once every part is in). The transfers themselves are
// nvme_store.cpp's move().
#include <string>
#include <vector>

#include "nvme_format.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

using nvme::aligned_block;
using nvme::invalid;

result<std::uint64_t> nvme_store::write(const void* src, std::size_t bytes) {
  if (src == nullptr || bytes == 0) return invalid("write of a null buffer or 0 bytes");
  auto id = begin_write(bytes);
  if (!id) return id;
  if (auto s = write_part(*id, src, bytes); !s) return s;  // the extent is freed
  return id;
}

result<std::uint64_t> nvme_store::begin_write(std::size_t bytes) {
  if (bytes == 0) return invalid("write of 0 bytes");
  std::lock_guard lock(mu_);
  const std::uint64_t span = span_of(bytes);
  const std::uint64_t data = span - block_;
  // Extents of a request or more start on a request boundary: requests
  // straddling the disk's larger units cost up to a third of the write
  // throughput here (bench/RESULTS.md).
  const auto offset =
      space_.take(span, data >= options_.nvme_block_size ? options_.nvme_block_size : 0);
  if (!offset) {
    ++stats_.failed;
    return status{errc::out_of_memory, "nvme store: capacity " +
                                           std::to_string(options_.nvme_capacity) + " bytes of " +
                                           options_.nvme_dir + " reached"};
  }
  if (auto grown = reserve_file(*offset + span); !grown) {
    space_.give(*offset, span);
    ++stats_.failed;
    return grown;
  }
  const std::uint64_t id = next_id_++;
  writing_.emplace(id, partial_write{extent{*offset, bytes, span, 0}, 0});
  return id;
}

status nvme_store::write_part(std::uint64_t id, const void* src, std::size_t bytes) {
  if (src == nullptr || bytes == 0) return invalid("write of a null buffer or 0 bytes");
  std::lock_guard lock(mu_);
  auto it = writing_.find(id);
  if (it == writing_.end()) return invalid("no extent " + std::to_string(id) + " being written");
  partial_write& w = it->second;
  const std::size_t left = w.e.bytes - w.written;
  const bool last = bytes == left;
  if (bytes > left || (!last && bytes % block_ != 0)) {
    return invalid("write of " + std::to_string(bytes) + " bytes to extent " + std::to_string(id) +
                   " (" + std::to_string(left) +
                   " left; parts before the last must be multiples of " + std::to_string(block_) +
                   ")");
  }
  auto* user = const_cast<unsigned char*>(static_cast<const unsigned char*>(src));  // only read
  // The trailer says whose extent this is; it goes out with the last part.
  std::vector<unsigned char> trailer_storage(last ? 2 * block_ : 0);
  unsigned char* trailer = last ? aligned_block(trailer_storage, block_) : nullptr;
  status st =
      move(io_kind::write, w.e.offset + w.written, user, bytes, w.e.crc, trailer, {id, w.e.bytes});
  if (!st) {
    space_.give(w.e.offset, w.e.span);
    writing_.erase(it);
    ++stats_.failed;
    return st;
  }
  w.written += bytes;
  stats_.bytes_written += bytes;
  if (last) {
    extents_.emplace(id, w.e);
    ++stats_.extents;
    stats_.stored_bytes += w.e.bytes;
    writing_.erase(it);
  }
  return {};
}

status nvme_store::abandon_write(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = writing_.find(id);
  if (it == writing_.end()) return invalid("no extent " + std::to_string(id) + " being written");
  space_.give(it->second.e.offset, it->second.e.span);
  writing_.erase(it);
  return {};
}

status nvme_store::read(std::uint64_t id, void* dst, std::size_t bytes) {
  if (dst == nullptr) return invalid("read into a null buffer");
  {
    std::lock_guard lock(mu_);
    auto it = extents_.find(id);
    if (it == extents_.end()) return invalid("no extent " + std::to_string(id));
    if (bytes != it->second.bytes) {
      return invalid("extent " + std::to_string(id) + " holds " + std::to_string(it->second.bytes) +
                     " bytes, not " + std::to_string(bytes));
    }
  }
  std::uint32_t crc = 0;
  if (auto s = read_part(id, 0, dst, bytes, crc); !s) return s;
  return check_read(id, crc);
}

status nvme_store::read_part(std::uint64_t id, std::size_t offset, void* dst, std::size_t bytes,
                             std::uint32_t& crc) {
  if (dst == nullptr || bytes == 0) return invalid("read into a null buffer or of 0 bytes");
  std::lock_guard lock(mu_);
  auto it = extents_.find(id);
  if (it == extents_.end()) return invalid("no extent " + std::to_string(id));
  const extent& e = it->second;
  if (offset % block_ != 0 || offset > e.bytes || bytes > e.bytes - offset) {
    return invalid("read of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                   " of extent " + std::to_string(id) + " (" + std::to_string(e.bytes) +
                   " bytes; offsets are multiples of " + std::to_string(block_) + ")");
  }
  status st = move(io_kind::read, e.offset + offset, static_cast<unsigned char*>(dst), bytes, crc);
  if (!st) {
    ++stats_.failed;
    return st;
  }
  stats_.bytes_read += bytes;
  return {};
}

status nvme_store::check_read(std::uint64_t id, std::uint32_t crc) {
  std::lock_guard lock(mu_);
  auto it = extents_.find(id);
  if (it == extents_.end()) return invalid("no extent " + std::to_string(id));
  if (crc == it->second.crc) return {};
  ++stats_.failed;
  return mismatch(id, it->second, crc, "failed its checksum");
}

}  // namespace strata
