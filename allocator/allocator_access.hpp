// How the allocator's own C API (c_api.cpp) reaches the implementation
// behind a strata::allocator: a friend of the public class, private to
// allocator/.
//
// Thread safety: as the allocator's.
#pragma once

#include <memory>

#include "caching_allocator.hpp"
#include "strata/strata.hpp"

namespace strata {

struct allocator_access {
  /// A public allocator owning `impl` (not null).
  static allocator wrap(std::unique_ptr<caching_allocator> impl);
  /// The implementation behind `a`; null if `a` was moved from.
  static caching_allocator* impl(allocator& a) noexcept;
};

}  // namespace strata
