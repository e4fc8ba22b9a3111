// The page table's shadows on their own: a page mapped in two streams'
// arenas whose other mapping goes while its shadow waits on an epoch.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "event_pool.hpp"
#include "page_table.hpp"
#include "sim_device.hpp"
#include "stream_arena.hpp"

namespace strata::testing {
namespace {

// A page mapped in arena A (stream 1) and arena B (stream 2) is live at A,
// so its mapping at B is shadowed. It is freed at A while stream 1 still
// has work queued: B's shadow waits for that work. Its mapping at A is
// then unmapped (an arena out of address space gives back what no block
// uses) before settle() runs: B's mapping is the page's only one, and
// still shadowed. Once the epoch is known complete, settle() must lift that
// shadow. It used to skip a page mapped once, leaving the shadow (and the
// page, which empty_cache could not release) for good:
// AllocatorModel.MillionRandomOperations kept one 2 MiB page about one run
// in twenty under load.
TEST(PageTable, ALoneShadowedMappingIsLiftedOnceItsEpochIsDone) {
  auto opened = open_device("sim:capacity=16MiB");
  ASSERT_TRUE(opened.ok());
  device& dev = **opened;
  const std::size_t g = dev.granularity();
  auto s1 = dev.create_stream();
  auto s2 = dev.create_stream();
  auto base_a = dev.reserve(4 * g);
  auto base_b = dev.reserve(4 * g);
  ASSERT_TRUE(s1.ok() && s2.ok() && base_a.ok() && base_b.ok());
  event_pool events(dev);
  {
    stream_arena a(*s1, pool_kind::large, *base_a, 4 * g, g);
    stream_arena b(*s2, pool_kind::large, *base_b, 4 * g, g);
    page_table table(g);
    const std::uint32_t slot = table.add_run(page_run{}, 1);
    const std::uint32_t id = table.run_pages(slot).front();
    table.add_mapping(id, a, 0);
    table.add_mapping(id, b, 0);
    table.block_live(a, a.page_addr(0), g);
    ASSERT_TRUE(table.mappings(id)[1].shadowed);

    std::atomic<bool> go{false};
    const host_fn hold = [](void* arg) {
      while (!static_cast<std::atomic<bool>*>(arg)->load()) std::this_thread::yield();
    };
    ASSERT_TRUE(dev.launch_host_fn(*s1, hold, &go).ok());
    a.mark_freed(a.page_addr(0), g);
    ASSERT_TRUE(a.seal(dev, events).ok());
    table.block_dead(a, a.page_addr(0), g);
    ASSERT_TRUE(table.unsettled()) << "stream 1's work is still queued";
    ASSERT_TRUE(table.mappings(id)[1].shadowed);

    go = true;
    ASSERT_TRUE(a.wait_idle(a.open_epoch(), dev, events).ok());
    table.remove_mapping(a, 0);
    ASSERT_EQ(table.mappings(id).size(), 1u);
    table.settle();
    EXPECT_FALSE(table.mappings(id)[0].shadowed) << "the shadow outlived its epoch";
    EXPECT_FALSE(table.unsettled());
    table.remove_mapping(b, 0);
    (void)table.remove_run(slot);
    a.drop_events(events);
    b.drop_events(events);
  }
  ASSERT_TRUE(dev.synchronize().ok());
  ASSERT_TRUE(dev.free_reservation(*base_a, 4 * g).ok());
  ASSERT_TRUE(dev.free_reservation(*base_b, 4 * g).ok());
}

}  // namespace
}  // namespace strata::testing
