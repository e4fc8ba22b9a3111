#include "write_behind_budget.hpp"

#include <algorithm>

namespace strata {

result<write_behind_budget> write_behind_budget::create(const tier_options& options,
                                                        std::size_t block, std::size_t chunk) {
  write_behind_budget b;
  if (!options.nvme_write_behind) return b;
  b.room_ = std::min(options.host_lookahead, options.host_capacity);
  if (b.room_ == 0) return b;
  b.host_capacity_ = options.host_capacity;
  b.nvme_capacity_ = options.nvme_capacity;
  b.bounce_bytes_ =
      std::max(block, std::min<std::size_t>(std::size_t{1} << 20, chunk) / block * block);
  b.bounce_.reset(static_cast<unsigned char*>(std::aligned_alloc(block, b.bounce_bytes_)));
  if (!b.bounce_) {
    return status{errc::out_of_memory,
                  "residency manager: no host memory for the write-behind's bounce chunk"};
  }
  return b;
}

}  // namespace strata
