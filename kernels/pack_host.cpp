// Multi-tensor pack and unpack on the host: N tensors to and from one flat
// buffer in one call (the gradient-bucket flatten).
//
// Tensors go in batches of pack_batch (the CUDA kernel's parameter block).
// A batch's work is the concatenation of its tensors' bytes, split into
// parts of whole 64 KiB pieces over the pool; a part copies the pieces of
// the tensors it covers, found by a scan of the batch (no allocation). Cost: one memcpy per tensor
// piece, plus O(N) per part to find where it starts; the argument check compares every pair of
// regions, O(N^2) for N entries (a few ms at 1,000 tensors).
#include <algorithm>
#include <cstring>
#include <string_view>

#include "argument_checks.hpp"
#include "host_runners.hpp"
#include "strata/kernels.hpp"

namespace strata {

namespace kernels {

namespace {

void pack_part(void* context, std::size_t begin, std::size_t end) {
  const auto& job = *static_cast<const pack_args*>(context);
  std::size_t at = 0;  // start of tensor i in the concatenation
  for (int i = 0; i < job.n && at < end; at += job.bytes[i], ++i) {
    const std::size_t lo = std::max(begin, at);
    const std::size_t hi = std::min(end, at + job.bytes[i]);
    if (lo >= hi) continue;
    unsigned char* tensor = static_cast<unsigned char*>(job.tensors[i]) + (lo - at);
    unsigned char* flat = job.flat + job.offsets[i] + (lo - at);
    if (job.unpack != 0) {
      std::memcpy(tensor, flat, hi - lo);
    } else {
      std::memcpy(flat, tensor, hi - lo);
    }
  }
}

}  // namespace

pack_args pack_batch_of(const pack_entry* entries, std::size_t n, void* flat, bool unpack) {
  pack_args a{};
  a.flat = static_cast<unsigned char*>(flat);
  a.unpack = unpack ? 1 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    a.tensors[a.n] = entries[i].tensor;
    a.bytes[a.n] = entries[i].bytes;
    a.offsets[a.n] = entries[i].offset;
    a.total += entries[i].bytes;
    ++a.n;
  }
  return a;
}

void run_pack(kernel_pool& pool, const pack_args& a) {
  pack_args copy = a;
  pool.parallel_for(a.total, pack_chunk_bytes, &pack_part, &copy);
}

status check_pack(const char* kernel, const pack_entry* entries, std::size_t n, const void* flat,
                  std::size_t flat_bytes) {
  if (n == 0) return {};
  if (entries == nullptr) return invalid(kernel, "null entries");
  if (flat == nullptr) return invalid(kernel, "null flat buffer");
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const pack_entry& e = entries[i];
    if (e.bytes == 0) continue;
    const auto which = [i] { return "entry " + std::to_string(i); };
    if (e.tensor == nullptr) return invalid(kernel, which() + " has a null tensor");
    if (e.offset > flat_bytes || e.bytes > flat_bytes - e.offset) {
      return invalid(kernel, which() + " ends past the flat buffer (" + std::to_string(flat_bytes) +
                                 " bytes)");
    }
    if (e.bytes > SIZE_MAX - total) return invalid(kernel, "total bytes overflow");
    total += e.bytes;
    const unsigned char* region = static_cast<const unsigned char*>(flat) + e.offset;
    if (overlaps(e.tensor, e.bytes, flat, flat_bytes)) {
      return invalid(kernel, which() + "'s tensor overlaps the flat buffer");
    }
    for (std::size_t j = 0; j < i; ++j) {
      const pack_entry& o = entries[j];
      const unsigned char* other = static_cast<const unsigned char*>(flat) + o.offset;
      if (overlaps(region, e.bytes, other, o.bytes)) {
        return invalid(kernel, which() + "'s region overlaps entry " + std::to_string(j) + "'s");
      }
      // Unpack writes the tensors: two writing the same bytes would race.
      if (std::string_view(kernel) == "unpack" && overlaps(e.tensor, e.bytes, o.tensor, o.bytes)) {
        return invalid(kernel,
                       which() + "'s tensor overlaps entry " + std::to_string(j) + "'s tensor");
      }
    }
  }
  return {};
}

}  // namespace kernels

namespace {

status run_pack(kernel_pool& pool, const pack_entry* entries, std::size_t n, void* flat,
                std::size_t flat_bytes, bool unpack) {
  if (auto s = kernels::check_pack(unpack ? "unpack" : "pack", entries, n, flat, flat_bytes); !s) {
    return s;
  }
  for (std::size_t first = 0; first < n; first += kernels::pack_batch) {
    kernels::run_pack(
        pool,
        kernels::pack_batch_of(
            entries + first, std::min<std::size_t>(n - first, kernels::pack_batch), flat, unpack));
  }
  return {};
}

}  // namespace

status pack_host(kernel_pool& pool, const pack_entry* entries, std::size_t n, void* flat,
                 std::size_t flat_bytes) {
  return run_pack(pool, entries, n, flat, flat_bytes, false);
}

status unpack_host(kernel_pool& pool, const pack_entry* entries, std::size_t n, const void* flat,
                   std::size_t flat_bytes) {
  // The flat buffer is only read by an unpack.
  return run_pack(pool, entries, n, const_cast<void*>(flat), flat_bytes, true);
}

}  // namespace strata
