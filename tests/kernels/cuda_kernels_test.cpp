// The kernels launched on the `cuda` device, compared with the host
// kernels: on a real GPU this checks the CUDA kernels themselves; over the
// stand-in driver (ctest's fakecuda.* tests) it checks the whole launch
// path (the embedded fatbin loads, every kernel is found, each argument
// struct arrives intact, launches keep stream order). Skips, saying why,
// when there is neither.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "device/device_kinds.hpp"
#include "strata/kernels.hpp"

namespace strata {
namespace {

constexpr std::uint32_t seed = 20261123;

// Device memory of at least `bytes`: one reservation, pages mapped and
// accessible.
class device_buffer {
 public:
  device_buffer(device& dev, std::size_t bytes) : dev_(dev) {
    const std::size_t g = dev.granularity();
    bytes_ = (bytes + g - 1) / g * g;
    auto va = dev.reserve(bytes_);
    auto run = dev.create_pages(bytes_);
    if (!va || !run) return;
    va_ = *va;
    run_ = *run;
    ok_ = dev.map(va_, bytes_, run_).ok() && dev.set_access(va_, bytes_).ok();
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&&) = delete;
  device_buffer& operator=(device_buffer&&) = delete;
  ~device_buffer() {
    if (va_ == 0) return;
    (void)dev_.synchronize();
    (void)dev_.unmap(va_, bytes_);
    (void)dev_.release_pages(run_);
    (void)dev_.free_reservation(va_, bytes_);
  }
  [[nodiscard]] bool ok() const { return ok_; }
  template <class T>
  [[nodiscard]] T* as() const {
    return reinterpret_cast<T*>(va_);
  }

 private:
  device& dev_;
  std::size_t bytes_ = 0;
  std::uintptr_t va_ = 0;
  page_run run_{};
  bool ok_ = false;
};

std::unique_ptr<device> open_cuda_or_skip() {
  auto dev = testing::cuda_kind::open_slow();
  if (!dev) {
    if (testing::cuda_kind::required()) {
      ADD_FAILURE() << "the cuda device should open here: " << dev.error().to_string();
    }
    return nullptr;
  }
  return std::move(*dev);
}

constexpr const char* no_cuda =
    "no CUDA driver and no stand-in: the CUDA kernels are not checked (compiled only)";

TEST(CudaKernels, AdamMatchesTheHostKernelInEveryMode) {
  auto dev = open_cuda_or_skip();
  if (dev == nullptr) GTEST_SKIP() << no_cuda;
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto pool = std::move(*kernel_pool::create(2));
  stream_kernels kernels(*dev, *pool);
  auto stream = dev->create_stream();
  ASSERT_TRUE(stream.ok());
  constexpr std::size_t n = 100003;  // not a multiple of any block
  const std::size_t bytes = n * sizeof(float);
  device_buffer p(*dev, bytes);
  device_buffer g(*dev, bytes);
  device_buffer m(*dev, bytes);
  device_buffer v(*dev, bytes);
  device_buffer vm(*dev, bytes);
  device_buffer out(*dev, bytes);
  ASSERT_TRUE(p.ok() && g.ok() && m.ok() && v.ok() && vm.ok() && out.ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  for (int mode = 0; mode < 6; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    std::vector<float> hp(n);
    std::vector<float> hg(n);
    std::vector<float> hm(n);
    std::vector<float> hv(n);
    std::vector<float> hvm(n);
    for (std::size_t i = 0; i < n; ++i) {
      hp[i] = dist(rng);
      hg[i] = dist(rng);
      hm[i] = dist(rng) * 0.1F;
      hv[i] = std::fabs(dist(rng)) * 0.01F;
      hvm[i] = hv[i] * 1.5F;
    }
    const dtype gt = mode % 3 == 0 ? dtype::f32 : mode % 3 == 1 ? dtype::bf16 : dtype::f16;
    const dtype ot = mode < 3 ? dtype::bf16 : dtype::f16;
    std::vector<std::uint16_t> hg16(n);
    ASSERT_TRUE(cast_copy_host(*pool, hg16.data(), gt == dtype::f32 ? dtype::bf16 : gt, hg.data(),
                               dtype::f32, n)
                    .ok());
    const void* grads_host = gt == dtype::f32 ? static_cast<const void*>(hg.data())
                                              : static_cast<const void*>(hg16.data());
    adam_options o;
    o.weight_decay = mode % 2 == 0 ? 0.01 : 0.0;
    o.decoupled_weight_decay = mode == 2;
    o.amsgrad = mode >= 4;
    o.maximize = mode == 5;
    const auto h2d = copy_direction::host_to_device;
    ASSERT_TRUE(dev->copy_async(p.as<float>(), hp.data(), bytes, h2d, *stream).ok());
    ASSERT_TRUE(dev->copy_async(g.as<float>(), grads_host, n * dtype_size(gt), h2d, *stream).ok());
    ASSERT_TRUE(dev->copy_async(m.as<float>(), hm.data(), bytes, h2d, *stream).ok());
    ASSERT_TRUE(dev->copy_async(v.as<float>(), hv.data(), bytes, h2d, *stream).ok());
    ASSERT_TRUE(dev->copy_async(vm.as<float>(), hvm.data(), bytes, h2d, *stream).ok());
    adam_tensors t{p.as<float>(),  g.as<void>(), gt, m.as<float>(), v.as<float>(), vm.as<float>(),
                   out.as<void>(), ot,           n};
    // The host reference on its own copies: the queued copies above read
    // hp, hm, hv and hvm when the stream reaches them.
    std::vector<float> rp = hp;
    std::vector<float> rm = hm;
    std::vector<float> rv = hv;
    std::vector<float> rvm = hvm;
    adam_tensors ht{rp.data(), grads_host, gt, rm.data(), rv.data(), rvm.data(), nullptr, ot, n};
    for (std::uint64_t step = 1; step <= 2; ++step) {
      ASSERT_TRUE(kernels.adam_step(*stream, t, o, step).ok());
      ASSERT_TRUE(adam_step_host(*pool, ht, o, step).ok());
    }
    std::vector<float> back(n);
    std::vector<std::uint16_t> back_out(n);
    const auto d2h = copy_direction::device_to_host;
    ASSERT_TRUE(dev->copy_async(back.data(), p.as<float>(), bytes, d2h, *stream).ok());
    ASSERT_TRUE(dev->copy_async(back_out.data(), out.as<void>(), n * 2, d2h, *stream).ok());
    ASSERT_TRUE(dev->synchronize_stream(*stream).ok());
    std::vector<std::uint16_t> expect_out(n);
    ASSERT_TRUE(cast_copy_host(*pool, expect_out.data(), ot, rp.data(), dtype::f32, n).ok());
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(back[i], rp[i], std::fabs(rp[i]) * 5e-7F + 1e-30F) << i;
      ASSERT_EQ(back_out[i], expect_out[i]) << "params_out " << i;
    }
  }
  ASSERT_TRUE(dev->destroy_stream(*stream).ok());
}

TEST(CudaKernels, CastPackAndAxpyMatchTheHostKernels) {
  auto dev = open_cuda_or_skip();
  if (dev == nullptr) GTEST_SKIP() << no_cuda;
  auto pool = std::move(*kernel_pool::create(2));
  stream_kernels kernels(*dev, *pool);
  auto stream = dev->create_stream();
  ASSERT_TRUE(stream.ok());
  constexpr std::size_t n = 70001;
  const std::size_t bytes = n * sizeof(float);
  device_buffer x(*dev, bytes);
  device_buffer y(*dev, bytes);
  device_buffer half(*dev, n * 2);
  // 100 tensors (two launches of the pack kernel), unaligned sizes.
  device_buffer tensors(*dev, bytes);
  device_buffer flat(*dev, bytes + 4096);
  ASSERT_TRUE(x.ok() && y.ok() && half.ok() && tensors.ok() && flat.ok());
  std::vector<float> hx(n);
  std::vector<float> hy(n);
  for (std::size_t i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i % 977) * 0.013F - 3.0F;
    hy[i] = static_cast<float>(i % 13);
  }
  const auto h2d = copy_direction::host_to_device;
  const auto d2h = copy_direction::device_to_host;
  ASSERT_TRUE(dev->copy_async(x.as<float>(), hx.data(), bytes, h2d, *stream).ok());
  ASSERT_TRUE(dev->copy_async(y.as<float>(), hy.data(), bytes, h2d, *stream).ok());
  ASSERT_TRUE(kernels.axpy(*stream, y.as<float>(), 0.5F, x.as<float>(), n).ok());
  ASSERT_TRUE(kernels.scale(*stream, y.as<float>(), 3.0F, n).ok());
  ASSERT_TRUE(
      kernels.cast_copy(*stream, half.as<void>(), dtype::f16, y.as<void>(), dtype::f32, n).ok());
  std::vector<pack_entry> entries;
  std::size_t at = 0;
  std::size_t offset = 0;
  for (int i = 0; i < 100 && at < bytes; ++i) {
    const std::size_t len = std::min<std::size_t>(bytes - at, 1000 + 37 * i);
    entries.push_back({tensors.as<unsigned char>() + at, len, offset});
    at += len;
    offset += len + (i % 5);  // gaps
  }
  ASSERT_TRUE(dev->copy_async(tensors.as<float>(), hx.data(), bytes, h2d, *stream).ok());
  ASSERT_TRUE(
      kernels.pack(*stream, entries.data(), entries.size(), flat.as<void>(), bytes + 4096).ok());
  std::vector<float> back(n);
  std::vector<std::uint16_t> back_half(n);
  std::vector<unsigned char> back_flat(bytes + 4096);
  ASSERT_TRUE(dev->copy_async(back.data(), y.as<float>(), bytes, d2h, *stream).ok());
  ASSERT_TRUE(dev->copy_async(back_half.data(), half.as<void>(), n * 2, d2h, *stream).ok());
  ASSERT_TRUE(dev->copy_async(back_flat.data(), flat.as<void>(), bytes + 4096, d2h, *stream).ok());
  ASSERT_TRUE(dev->synchronize_stream(*stream).ok());
  ASSERT_TRUE(axpy_host(*pool, hy.data(), 0.5F, hx.data(), n).ok());
  ASSERT_TRUE(scale_host(*pool, hy.data(), 3.0F, n).ok());
  std::vector<std::uint16_t> expect_half(n);
  ASSERT_TRUE(cast_copy_host(*pool, expect_half.data(), dtype::f16, hy.data(), dtype::f32, n).ok());
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], hy[i]) << "axpy/scale " << i;
    ASSERT_EQ(back_half[i], expect_half[i]) << "cast " << i;
  }
  const auto* src = reinterpret_cast<const unsigned char*>(hx.data());
  std::size_t from = 0;
  for (const pack_entry& e : entries) {
    ASSERT_EQ(std::memcmp(back_flat.data() + e.offset, src + from, e.bytes), 0)
        << "pack region at " << e.offset;
    from += e.bytes;
  }
  ASSERT_TRUE(dev->destroy_stream(*stream).ok());
}

}  // namespace
}  // namespace strata
