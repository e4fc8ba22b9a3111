// For tests: a counters struct made from its counter_list.hpp list holds
// exactly the list's members (a member added outside the list changes its
// size), and its map has each under the member's name with its value.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "strata/counter_list.hpp"
#include "strata/strata.hpp"

#define STRATA_TEST_COUNTER_SET(name, what) c.name = ++n;
#define STRATA_TEST_COUNTER_CHECK(name, what) \
  EXPECT_EQ(m.at(#name), static_cast<std::int64_t>(c.name)) << #name;

/// Checks counters struct `type` against its list `LIST` (each member set
/// to a different value, then read back from to_map()).
#define STRATA_EXPECT_COUNTERS_NAMED_ONCE(type, LIST)                              \
  do {                                                                             \
    type c;                                                                        \
    std::uint64_t n = 0;                                                           \
    LIST(STRATA_TEST_COUNTER_SET)                                                  \
    const ::strata::stat_map m = c.to_map();                                       \
    EXPECT_EQ(sizeof c, n * sizeof(std::uint64_t)) << "a member outside the list"; \
    EXPECT_EQ(m.size(), n);                                                        \
    LIST(STRATA_TEST_COUNTER_CHECK)                                                \
  } while (false)
