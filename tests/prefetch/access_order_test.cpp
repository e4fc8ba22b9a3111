// The recorded order: following it, re-synchronizing, next-use distances
// (wrapping into the next step).
#include "access_order.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace strata {
namespace {

// Forward 1, 2, 3 then backward 3, 2, 1; buffer h has h * 10 bytes.
access_order forward_backward() {
  std::vector<access> order;
  for (const std::uint64_t h : {1, 2, 3, 3, 2, 1}) order.push_back({h, nullptr, h * 10});
  return access_order(std::move(order));
}

TEST(AccessOrder, FollowsAndReSynchronizesAtTheNextPosition) {
  access_order o = forward_backward();
  EXPECT_EQ(o.follow(1).how, access_order::match::in_order);
  // 3 instead of 2: the next 3 after the cursor is position 2.
  const auto f = o.follow(3);
  EXPECT_EQ(f.how, access_order::match::resynced);
  EXPECT_EQ(f.expected_at, 1u);
  EXPECT_EQ(f.expected_handle, 2u);
  EXPECT_EQ(f.resumed_at, 2u);
  EXPECT_EQ(o.follow(3).how, access_order::match::in_order);
  // 7 is not in the order: the cursor stays.
  EXPECT_EQ(o.follow(7).how, access_order::match::unrecorded);
  EXPECT_EQ(o.cursor(), 4u);
  EXPECT_EQ(o.follow(2).how, access_order::match::in_order);
  // 2 again, after its last position: wraps to the next step's first.
  EXPECT_EQ(o.follow(2).resumed_at, 1u);
  o.rewind();
  EXPECT_EQ(o.cursor(), 0u);
  EXPECT_EQ(o.ahead(0).handle, 1u);
  EXPECT_EQ(o.ahead(7).handle, 2u) << "ahead wraps";
}

TEST(AccessOrder, NextUseIsBytesFromTheCursorWrapping) {
  access_order o = forward_backward();
  EXPECT_EQ(o.next_use(1), 0u);
  EXPECT_EQ(o.next_use(2), 10u);
  EXPECT_EQ(o.next_use(3), 30u);
  EXPECT_EQ(o.next_use(9), std::numeric_limits<std::uint64_t>::max());
  for (const std::uint64_t h : {1, 2, 3, 3}) (void)o.follow(h);
  // Cursor at position 4 (the backward 2): 1 is next at position 5.
  EXPECT_EQ(o.next_use(2), 0u);
  EXPECT_EQ(o.next_use(1), 20u);
  // 3's next use is in the next step: the rest of this one (20 + 10) plus
  // the bytes before position 2 of the next (10 + 20).
  EXPECT_EQ(o.next_use(3), 60u);
}

}  // namespace
}  // namespace strata
