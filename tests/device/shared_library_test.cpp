#include "strata/shared_library.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace strata {
namespace {

using strlen_fn = std::size_t (*)(const char*);

TEST(SharedLibrary, OpensOnFirstUseAndFindsFunctions) {
  const shared_library libc("libc.so.6");
  ASSERT_TRUE(libc.open().ok()) << libc.open().to_string();
  strlen_fn fn = nullptr;
  ASSERT_TRUE(libc.find("strlen", fn));
  EXPECT_EQ(fn("strata"), 6U);
  EXPECT_EQ(libc.find("strata_no_such_function"), nullptr);
}

TEST(SharedLibraryErrors, AMissingLibraryIsNotSupportedWithDlopensReason) {
  const shared_library none("libstrata-no-such-library.so.9");
  const status s = none.open();
  EXPECT_EQ(s.code(), errc::not_supported);
  EXPECT_NE(s.message().find("libstrata-no-such-library.so.9"), std::string::npos) << s.message();
  strlen_fn fn = &std::strlen;
  EXPECT_FALSE(none.find("strlen", fn));
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(none.open().message(), s.message()) << "a later call must return the same";
}

TEST(SharedLibraryErrors, IfAlreadyLoadedNeverLoads) {
  // libc is loaded in every process; a library nobody loaded is not found,
  // and is not loaded by asking.
  const shared_library libc("libc.so.6", shared_library::open_mode::if_already_loaded);
  EXPECT_TRUE(libc.open().ok()) << libc.open().to_string();
  const shared_library absent("libstrata-no-such-library.so.9",
                              shared_library::open_mode::if_already_loaded);
  EXPECT_EQ(absent.open().code(), errc::not_supported);
}

TEST(SharedLibrary, FindNextReachesTheDefinitionAfterOurs) {
  auto* next = reinterpret_cast<strlen_fn>(shared_library::find_next("strlen"));
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next("abc"), 3U);
  EXPECT_EQ(shared_library::find_next("strata_no_such_function"), nullptr);
}

TEST(SharedLibrary, ConcurrentFirstUsesOpenOnce) {
  const shared_library libc("libc.so.6");
  std::vector<void*> found(8);
  std::vector<std::thread> threads;
  for (void*& slot : found) {
    threads.emplace_back([&libc, &slot] { slot = libc.find("strlen"); });
  }
  for (auto& t : threads) t.join();
  for (void* p : found) EXPECT_EQ(p, found[0]);
  EXPECT_NE(found[0], nullptr);
}

}  // namespace
}  // namespace strata
