#include "bucket_plan.hpp"

namespace strata {

std::vector<bucket> plan_buckets(const gradient_buffer& grads, std::size_t first_limit,
                                 std::size_t limit) {
  std::vector<bucket> out;
  for (const std::size_t p : grads.order()) {
    const gradient_param g = grads.param(p);
    const std::size_t bytes = grads.bytes_of(p);
    const bool fits = !out.empty() && out.back().type == g.type &&
                      out.back().payload + bytes <= (out.size() == 1 ? first_limit : limit);
    if (!fits) out.push_back({{}, grads.offset(p), 0, 0, g.type});
    bucket& b = out.back();
    b.params.push_back(p);
    b.payload += bytes;
    b.bytes = grads.offset(p) + bytes - b.offset;
  }
  return out;
}

}  // namespace strata
