// strata/kernels.h: handles, the host and async forms, and its errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fakecuda/stand_in_spec.hpp"
#include "strata/kernels.h"
#include "strata/kernels.hpp"

extern "C" strata_status c_adamw_step(strata_kernels* k, float* p, const float* g, float* m,
                                      float* v, uint16_t* out, size_t n);
extern "C" strata_status c_cast_with_bad_dtype(strata_kernels* k, uint16_t* dst, const float* src,
                                               size_t n);

namespace {

TEST(KernelsCApi, HostStepMatchesTheCppKernel) {
  strata_kernels* k = nullptr;
  ASSERT_EQ(strata_kernels_create(nullptr, 2, &k), STRATA_OK);
  const std::size_t n = 1000;
  std::vector<float> p(n, 1.0F);
  std::vector<float> g(n, 0.25F);
  std::vector<float> m(n, 0.0F);
  std::vector<float> v(n, 0.0F);
  std::vector<std::uint16_t> out(n);
  ASSERT_EQ(c_adamw_step(k, p.data(), g.data(), m.data(), v.data(), out.data(), n), STRATA_OK);
  std::vector<float> rp(n, 1.0F);
  std::vector<float> rm(n, 0.0F);
  std::vector<float> rv(n, 0.0F);
  auto pool = std::move(*strata::kernel_pool::create(1));
  strata::adam_options o;
  o.weight_decay = 0.01;
  o.decoupled_weight_decay = true;
  strata::adam_tensors t{rp.data(), g.data(), strata::dtype::f32,  rm.data(), rv.data(),
                         nullptr,   nullptr,  strata::dtype::bf16, n};
  ASSERT_TRUE(strata::adam_step_host(*pool, t, o, 1).ok());
  EXPECT_EQ(p, rp);
  std::uint16_t h = 0;
  EXPECT_EQ(c_cast_with_bad_dtype(k, &h, p.data(), 1), STRATA_ERROR_INVALID_ARGUMENT);
  // The async forms need an allocator.
  float x = 1.0F;
  EXPECT_EQ(strata_scale_async(k, nullptr, &x, 2.0F, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(strata_last_error_message(), "without an allocator"), nullptr);
  ASSERT_EQ(strata_kernels_destroy(k), STRATA_OK);
  EXPECT_EQ(strata_kernels_destroy(k), STRATA_ERROR_INVALID_ARGUMENT) << "double destroy";
  EXPECT_EQ(strata_scale_host(k, &x, 2.0F, 1), STRATA_ERROR_INVALID_ARGUMENT) << "destroyed";
}

TEST(KernelsCApi, AsyncFormsRunInStreamOrderOnTheAllocatorsDevice) {
  // The sim device, or the cuda device over the stand-in driver when ctest
  // runs the test there (stand_in_spec.hpp): its device memory is host
  // memory too, and the kernels run through the real fatbin's names.
  const auto device = strata::testing::stand_in_spec("sim:capacity=64MiB");
  ASSERT_TRUE(device.ok()) << device.error().to_string();
  strata_allocator* a = nullptr;
  ASSERT_EQ(strata_allocator_create(("device:" + *device).c_str(), &a), STRATA_OK);
  strata_kernels* k = nullptr;
  ASSERT_EQ(strata_kernels_create(a, 2, &k), STRATA_OK);
  EXPECT_EQ(strata_allocator_destroy(a), STRATA_ERROR_INVALID_ARGUMENT)
      << "the allocator is in use by the kernels handle";
  void* buf = nullptr;
  ASSERT_EQ(strata_malloc_async(a, 4096, nullptr, &buf), STRATA_OK);
  auto* y = static_cast<float*>(buf);
  for (int i = 0; i < 1024; ++i) y[i] = 1.0F;
  ASSERT_EQ(strata_scale_async(k, nullptr, y, 3.0F, 1024), STRATA_OK);
  ASSERT_EQ(strata_axpy_async(k, nullptr, y, 1.0F, y, 1024), STRATA_OK);  // y += y
  ASSERT_EQ(strata_kernels_destroy(k), STRATA_OK);                        // waits for the device
  EXPECT_EQ(y[0], 6.0F);
  EXPECT_EQ(y[1023], 6.0F);
  EXPECT_EQ(strata_cast_copy_host(nullptr, y, STRATA_BF16, y, STRATA_F32, 1),
            STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_free_async(a, buf, nullptr), STRATA_OK);
  ASSERT_EQ(strata_allocator_destroy(a), STRATA_OK);
}

}  // namespace
