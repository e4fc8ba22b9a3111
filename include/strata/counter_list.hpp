// Counters named once. A type's counters are one list, each entry the
// member's name and what it counts:
//
//   #define STRATA_EXAMPLE_COUNTERS(X)
//     X(steps, "steps ended")
//     X(hits, "acquires served ahead")
//
// (one macro, its lines joined by backslashes), and its counters struct
// takes from the list both its members and its stat map, whose keys are
// the members' names:
//
//   struct counters {
//     STRATA_EXAMPLE_COUNTERS(STRATA_COUNTER_MEMBER)
//     [[nodiscard]] stat_map to_map() const {
//       return {STRATA_EXAMPLE_COUNTERS(STRATA_COUNTER_ENTRY)};
//     }
//   };
//
// So a counter added to the list is in stats(), in the C API's JSON and in
// memory_summary()'s sections under its member's name, and cannot be left
// out of one of them. Counters are std::uint64_t (or std::int64_t), zero
// at first; the map holds them as std::int64_t (stat_map's type; a count
// past 2^63 wraps).
//
// Thread safety: none of its own; a counters struct is a value.
#pragma once

#include <cstdint>

/// One counter member: `what` documents it.
#define STRATA_COUNTER_MEMBER(name, what) std::uint64_t name = 0;
/// The same, signed (the allocator's, whose torch.cuda.memory_stats()
/// values are signed).
#define STRATA_SIGNED_COUNTER_MEMBER(name, what) std::int64_t name = 0;
/// One stat map entry {"name", value}, inside a counters struct's member
/// function.
#define STRATA_COUNTER_ENTRY(name, what) {#name, static_cast<std::int64_t>(name)},
