// Which gradients are reduced together: consecutive gradients of the
// buffer's layout order, one dtype per bucket, the first bucket up to
// `first_limit` bytes and the others up to `limit` (a gradient larger than
// the limit is a bucket alone).
//
// Invariants of the result: every parameter is in exactly one bucket;
// buckets follow the layout order; a bucket's [offset, offset + bytes)
// covers its gradients and the alignment padding between them, so the
// bucket is one contiguous slice of the buffer.
#pragma once

#include <cstddef>
#include <vector>

#include "strata/gradient_buffer.hpp"

namespace strata {

struct bucket {
  std::vector<std::size_t> params;  // in layout order
  std::size_t offset = 0;           // bytes into the gradient buffer
  std::size_t bytes = 0;            // the slice, padding included
  std::size_t payload = 0;          // the gradients' bytes alone
  dtype type = dtype::f32;
};

std::vector<bucket> plan_buckets(const gradient_buffer& grads, std::size_t first_limit,
                                 std::size_t limit);

}  // namespace strata
