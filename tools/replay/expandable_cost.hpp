// What PyTorch's expandable segments would pay the driver for a replayed
// trace's requests: the growths of its model (pytorch_allocator.hpp), made
// on a device priced like the timeline's, so `strata replay --timeline`
// can set Strata's mapping time beside the allocator users compare it with
// (docs/replay.md, "Timeline").
//
// Thread safety: a pure function (it opens its own device).
#pragma once

#include <string>
#include <vector>

#include "pytorch_model/pytorch_allocator.hpp"
#include "strata/error.hpp"

namespace strata::replay {

/// What `growths` (pytorch_allocator_model::growths of an expandable model)
/// cost on a fresh device opened from `spec` (the timeline's timing-only
/// sim device, so its prices): each growth as PyTorch 2.11's
/// ExpandableSegment maps it, one create_pages and one map per page of the
/// growth's page size and one set_access over the growth. Milliseconds of
/// driver time (reserving the address space is not counted). Errors: the
/// device's own, e.g. out_of_memory when the pages exceed its capacity, or
/// invalid_argument when a page size is not a multiple of its granularity
/// or a growth is not whole pages.
[[nodiscard]] result<double> expandable_map_ms(
    const std::string& spec, const std::vector<pytorch_allocator_model::growth>& growths);

}  // namespace strata::replay
