// The cuda device over the stand-in driver (tests/fakecuda): what only the
// stand-in can show. ctest runs these as fakecuda.CudaOverStandIn.*; without
// the stand-in they skip.
#include <gtest/gtest.h>

#include <string>

#if STRATA_HAVE_CUDA
#include <cuda.h>
#endif

#include "fakecuda/fakecuda_control.hpp"
#include "strata/device.hpp"

namespace strata::testing {
namespace {

// Called with the driver's own types: a call through another function type
// is undefined (clang's UBSan checks it).
#if STRATA_HAVE_CUDA
using context_t = CUcontext;
using ctx_get_fn = CUresult (*)(CUcontext*);
using ctx_set_fn = CUresult (*)(CUcontext);
#else
using context_t = void*;  // no stand-in without the toolkit: never called
using ctx_get_fn = int (*)(void**);
using ctx_set_fn = int (*)(void*);
#endif

class CudaOverStandIn : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = stand_in();
    if (fake_ == nullptr) {
      if (cuda_expected())
        FAIL() << "STRATA_TEST_CUDA_DRIVER is set, but the stand-in is not loaded";
      GTEST_SKIP() << "needs the stand-in CUDA driver (ctest runs these as fakecuda.*)";
    }
    ASSERT_EQ(fake_->configure(0, "capacity=64MiB"), 0) << "a device is still open";
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ctx_get_ = reinterpret_cast<ctx_get_fn>(dlsym(lib, "cuCtxGetCurrent"));
    ctx_set_ = reinterpret_cast<ctx_set_fn>(dlsym(lib, "cuCtxSetCurrent"));
    ASSERT_NE(ctx_get_, nullptr);
    ASSERT_NE(ctx_set_, nullptr);
  }

  const fakecuda_controls* fake_ = nullptr;
  ctx_get_fn ctx_get_ = nullptr;
  ctx_set_fn ctx_set_ = nullptr;
};

TEST_F(CudaOverStandIn, TheCallersContextIsLeftAsItWas) {
  auto d = open_device("cuda:0");
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  ASSERT_EQ(static_cast<int>(ctx_set_(nullptr)), 0);
  auto base = (*d)->reserve(4 << 20);
  ASSERT_TRUE(base.ok()) << base.error().to_string();
  auto s = (*d)->create_stream();
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  ASSERT_TRUE((*d)->synchronize_stream(*s).ok());
  auto* current = reinterpret_cast<context_t>(1);
  ASSERT_EQ(static_cast<int>(ctx_get_(&current)), 0);
  EXPECT_EQ(current, nullptr) << "a device call left its context current on this thread";
  ASSERT_TRUE((*d)->destroy_stream(*s).ok());
  ASSERT_TRUE((*d)->free_reservation(*base, 4 << 20).ok());
}

TEST_F(CudaOverStandIn, ClosingTheDeviceReleasesEverythingItStillHolds) {
  {
    auto d = open_device("cuda:0");
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    device& dev = **d;
    const std::size_t g = dev.granularity();
    auto base = dev.reserve(4 * g);
    auto run = dev.create_pages(2 * g);
    ASSERT_TRUE(base.ok() && run.ok());
    ASSERT_TRUE(dev.map(*base, 2 * g, *run).ok());
    ASSERT_TRUE(dev.set_access(*base, 2 * g).ok());
    ASSERT_TRUE(dev.create_pages(g).ok());
    ASSERT_TRUE(dev.create_stream().ok());
    ASSERT_TRUE(dev.create_event().ok());
    ASSERT_TRUE(dev.host_alloc(1 << 20).ok());
    static char pinned[4096];
    ASSERT_TRUE(dev.host_register(pinned, sizeof pinned).ok());
    EXPECT_GT(fake_->live_objects(), 0u);
  }
  EXPECT_EQ(fake_->live_objects(), 0u) << "the device leaked driver objects:\n"
                                       << fake_->recent_calls(40);
}

TEST_F(CudaOverStandIn, DriverFailuresBecomeStatusesNamingTheCall) {
  auto d = open_device("cuda:0");
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  constexpr int cuda_error_unknown = 999;
  constexpr int cuda_error_out_of_memory = 2;
  ASSERT_EQ(fake_->fail_call("cuMemCreate", 1, cuda_error_out_of_memory), 0);
  auto run = (*d)->create_pages((*d)->granularity());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.code(), errc::out_of_memory);
  EXPECT_NE(run.error().message().find("cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos)
      << run.error().message();
  ASSERT_EQ(fake_->fail_call("cuStreamCreate", 1, cuda_error_unknown), 0);
  auto s = (*d)->create_stream();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), errc::device_error);
  EXPECT_NE(s.error().message().find("cuStreamCreate failed: CUDA_ERROR_UNKNOWN"),
            std::string::npos)
      << s.error().message();
}

}  // namespace
}  // namespace strata::testing
