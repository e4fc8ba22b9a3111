// The data movement of the `local` communicator: every rank's buffers are
// host-reachable (sim devices), so the last rank to arrive moves the bytes
// for all. Reductions go through a fixed-size fp32 accumulator, chunk by
// chunk: every rank's input chunk is read before any output chunk is
// written, so in-place calls are safe.
#include <algorithm>
#include <array>
#include <cstring>

#include "local_group.hpp"

namespace strata {

namespace {

constexpr std::size_t chunk_elements = 4096;
using chunk = std::array<float, chunk_elements>;

const unsigned char* bytes_of(const void* p, std::size_t element, dtype t) {
  return static_cast<const unsigned char*>(p) + element * dtype_size(t);
}
unsigned char* bytes_of(void* p, std::size_t element, dtype t) {
  return static_cast<unsigned char*>(p) + element * dtype_size(t);
}

// `n` elements of type `t` at `src` as fp32 into `dst`.
void load(kernel_pool& pool, float* dst, const void* src, dtype t, std::size_t n) {
  if (t == dtype::f32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    (void)cast_copy_host(pool, dst, dtype::f32, src, t, n);  // valid by construction
  }
}

void store(kernel_pool& pool, void* dst, dtype t, const float* src, std::size_t n) {
  if (t == dtype::f32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    (void)cast_copy_host(pool, dst, t, src, dtype::f32, n);
  }
}

// out[q] for every q in `outs` = op over ranks r of in[r], `count` elements
// starting at element `first` of each input.
void reduce(kernel_pool& pool, const std::vector<const void*>& in, std::size_t first,
            const std::vector<void*>& outs, std::size_t count, dtype t, reduce_op op) {
  chunk acc{};
  chunk term{};
  const auto ranks = static_cast<float>(in.size());
  for (std::size_t done = 0; done < count; done += chunk_elements) {
    const std::size_t n = std::min(chunk_elements, count - done);
    load(pool, acc.data(), bytes_of(in[0], first + done, t), t, n);
    for (std::size_t r = 1; r < in.size(); ++r) {
      load(pool, term.data(), bytes_of(in[r], first + done, t), t, n);
      for (std::size_t i = 0; i < n; ++i) acc[i] += term[i];
    }
    if (op == reduce_op::avg) {
      for (std::size_t i = 0; i < n; ++i) acc[i] /= ranks;
    }
    for (void* out : outs) store(pool, bytes_of(out, done, t), t, acc.data(), n);
  }
}

}  // namespace

void run_local_collective(const std::vector<std::optional<collective_call>>& calls,
                          kernel_pool& pool) {
  const collective_call& first = *calls[0];
  const std::size_t count = first.count;
  const dtype t = first.type;
  const std::size_t bytes = count * dtype_size(t);
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  for (const auto& c : calls) {
    sends.push_back(c->send);
    recvs.push_back(c->recv);
  }
  if (count == 0) return;
  switch (first.kind) {
    case collective::all_reduce:
      reduce(pool, sends, 0, recvs, count, t, first.op);
      break;
    case collective::reduce_scatter:
      for (std::size_t q = 0; q < recvs.size(); ++q) {
        reduce(pool, sends, q * count, {recvs[q]}, count, t, first.op);
      }
      break;
    case collective::all_gather:
      for (std::size_t r = 0; r < sends.size(); ++r) {
        for (void* out : recvs) std::memmove(bytes_of(out, r * count, t), sends[r], bytes);
      }
      break;
    case collective::broadcast: {
      const void* from = sends[static_cast<std::size_t>(first.root)];
      for (void* out : recvs) std::memmove(out, from, bytes);
      break;
    }
  }
}

}  // namespace strata
