// The stand-in NCCL's data movement: run by the last rank to reach a
// collective, for every rank at once, after checking that the ranks' calls
// match (NCCL's rule: same collective, count, type, operation and root on
// every rank; real NCCL hangs or corrupts memory when they do not, the
// stand-in fails the collective on every rank with ncclInvalidUsage).
//
// Cost: one pass over every rank's buffers, plus a scratch copy of the
// result so in-place calls read their inputs before any rank's output is
// written.
#include <cstring>
#include <string>
#include <vector>

#include "fake_nccl.hpp"
#include "float_formats.hpp"

namespace fakenccl {
namespace {

const char* name_of(kind k) {
  switch (k) {
    case kind::all_reduce:
      return "ncclAllReduce";
    case kind::reduce_scatter:
      return "ncclReduceScatter";
    case kind::all_gather:
      return "ncclAllGather";
    case kind::broadcast:
      return "ncclBroadcast";
  }
  return "?";
}

std::string describe(const call& c) {
  return std::string(name_of(c.what)) + "(count=" + std::to_string(c.count) +
         ", type=" + std::to_string(static_cast<int>(c.type)) +
         ", op=" + std::to_string(static_cast<int>(c.op)) + ", root=" + std::to_string(c.root) +
         ")";
}

float load(const void* base, std::size_t i, ncclDataType_t type) {
  namespace k = strata::kernels;
  std::uint16_t h = 0;
  switch (type) {
    case ncclFloat32: {
      float f = 0;
      std::memcpy(&f, static_cast<const char*>(base) + i * 4, 4);
      return f;
    }
    case ncclFloat16:
      std::memcpy(&h, static_cast<const char*>(base) + i * 2, 2);
      return k::f16_to_f32(h);
    default:
      std::memcpy(&h, static_cast<const char*>(base) + i * 2, 2);
      return k::bf16_to_f32(h);
  }
}

void store(void* base, std::size_t i, ncclDataType_t type, float v) {
  namespace k = strata::kernels;
  std::uint16_t h = 0;
  switch (type) {
    case ncclFloat32:
      std::memcpy(static_cast<char*>(base) + i * 4, &v, 4);
      return;
    case ncclFloat16:
      h = k::f32_to_f16(v);
      break;
    default:
      h = k::f32_to_bf16(v);
      break;
  }
  std::memcpy(static_cast<char*>(base) + i * 2, &h, 2);
}

// Element `i` reduced over the ranks' `send + offset` in rank order.
float reduce_at(const std::vector<call>& calls, std::size_t offset, std::size_t i) {
  const call& c0 = calls[0];
  float acc = load(c0.send, offset + i, c0.type);
  for (std::size_t r = 1; r < calls.size(); ++r) acc += load(calls[r].send, offset + i, c0.type);
  if (c0.op == ncclAvg) acc /= static_cast<float>(calls.size());
  return acc;
}

}  // namespace

ncclResult_t run_collective(std::vector<call>& calls, std::string& error) {
  const call& c0 = calls[0];
  for (std::size_t r = 1; r < calls.size(); ++r) {
    const call& c = calls[r];
    const bool reduces = c.what == kind::all_reduce || c.what == kind::reduce_scatter;
    if (c.what != c0.what || c.count != c0.count || c.type != c0.type ||
        (reduces && c.op != c0.op) || (c.what == kind::broadcast && c.root != c0.root)) {
      error = "mismatched collective: rank 0 called " + describe(c0) + ", rank " +
              std::to_string(r) + " called " + describe(c);
      return ncclInvalidUsage;
    }
  }
  const std::size_t n = calls.size();
  const std::size_t esize = element_bytes(c0.type);
  switch (c0.what) {
    case kind::all_reduce: {
      std::vector<char> out(c0.count * esize);
      for (std::size_t i = 0; i < c0.count; ++i)
        store(out.data(), i, c0.type, reduce_at(calls, 0, i));
      for (const call& c : calls) std::memcpy(c.recv, out.data(), out.size());
      break;
    }
    case kind::reduce_scatter: {
      std::vector<char> out(n * c0.count * esize);
      for (std::size_t i = 0; i < n * c0.count; ++i) {
        store(out.data(), i, c0.type, reduce_at(calls, 0, i));
      }
      for (std::size_t r = 0; r < n; ++r) {
        std::memcpy(calls[r].recv, out.data() + r * c0.count * esize, c0.count * esize);
      }
      break;
    }
    case kind::all_gather: {
      const std::size_t part = c0.count * esize;
      std::vector<char> out(n * part);
      for (std::size_t r = 0; r < n; ++r) std::memcpy(out.data() + r * part, calls[r].send, part);
      for (const call& c : calls) std::memcpy(c.recv, out.data(), out.size());
      break;
    }
    case kind::broadcast: {
      const std::size_t bytes = c0.count * esize;
      std::vector<char> out(static_cast<const char*>(calls[c0.root].send),
                            static_cast<const char*>(calls[c0.root].send) + bytes);
      for (const call& c : calls) std::memcpy(c.recv, out.data(), bytes);
      break;
    }
  }
  return ncclSuccess;
}

}  // namespace fakenccl
