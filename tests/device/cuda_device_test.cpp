// The cuda device on a host without a GPU: it must fail cleanly, with the
// error a user can act on. (With a GPU, the typed device suite runs on it.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "strata/device.hpp"

namespace strata::testing {
namespace {

bool driver_present() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib != nullptr;  // left loaded: unloading a driver is never safe
}

TEST(CudaDevice, WithoutADriverOpenFailsWithAClearError) {
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present; the typed suite covers cuda";
  auto d = open_device("cuda:0");
  ASSERT_FALSE(d.ok());
#if STRATA_HAVE_CUDA
  EXPECT_EQ(d.code(), errc::no_driver);
  EXPECT_NE(d.error().message().find("no CUDA driver (libcuda.so.1 not found"), std::string::npos)
      << d.error().message();
#else
  EXPECT_EQ(d.code(), errc::not_supported);
#endif
}

TEST(CudaDevice, AutoNeverFallsBackSilently) {
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present; 'auto' may open it";
  auto d = open_device("auto");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("sim:"), std::string::npos)
      << "the error should name the sim option: " << d.error().message();
}

TEST(CudaDevice, BadOrdinalIsRejected) {
  auto d = open_device("cuda:abc");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::invalid_argument);
}

}  // namespace
}  // namespace strata::testing
