// The kernels in stream order on the sim device: a kernel queued after a
// copy sees the copied bytes; a copy queued after a kernel sees its result.
// The copies are slowed down (sim's bandwidth model), so a kernel that ran
// early would read stale memory.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "strata/kernels.hpp"
#include "strata/strata.hpp"

namespace strata {
namespace {

struct sim_fixture {
  // 0.2 GB/s: a 1 MiB copy takes about 5 ms.
  allocator alloc = allocator::from_conf("device:sim:capacity=256MiB,h2d_gbps=0.2,d2h_gbps=0.2");
  stream_handle stream = *alloc.dev().create_stream();
  std::unique_ptr<kernel_pool> pool = std::move(*kernel_pool::create(2));
  stream_kernels kernels{alloc.dev(), *pool};
};

TEST(StreamKernels, AdamRunsAfterTheFillAndBeforeTheReadBack) {
  sim_fixture f;
  constexpr std::size_t n = 256 << 10;  // 1 MiB per fp32 buffer
  const std::size_t bytes = n * sizeof(float);
  auto* p = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  auto* g = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  auto* m = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  auto* v = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  std::vector<float> host_p(n, 1.0F);
  std::vector<float> host_g(n, 0.5F);
  std::vector<float> zeros(n, 0.0F);
  device& dev = f.alloc.dev();
  ASSERT_TRUE(dev.synchronize_stream(f.stream).ok());
  // Stale contents the kernel must not see.
  std::memset(g, 0, bytes);
  const auto h2d = copy_direction::host_to_device;
  ASSERT_TRUE(dev.copy_async(p, host_p.data(), bytes, h2d, f.stream).ok());
  ASSERT_TRUE(dev.copy_async(g, host_g.data(), bytes, h2d, f.stream).ok());
  ASSERT_TRUE(dev.copy_async(m, zeros.data(), bytes, h2d, f.stream).ok());
  ASSERT_TRUE(dev.copy_async(v, zeros.data(), bytes, h2d, f.stream).ok());
  adam_tensors t{p, g, dtype::f32, m, v, nullptr, nullptr, dtype::bf16, n};
  adam_options o;
  ASSERT_TRUE(f.kernels.adam_step(f.stream, t, o, 1).ok());
  std::vector<float> out(n, -1.0F);
  ASSERT_TRUE(dev.copy_async(out.data(), p, bytes, copy_direction::device_to_host, f.stream).ok());
  ASSERT_TRUE(dev.synchronize_stream(f.stream).ok());
  // The first Adam step moves every parameter by lr against the gradient's
  // sign (m/sqrt(v) = 1 after bias correction, up to eps).
  std::vector<float> ref = host_p;
  std::vector<float> rm(n, 0.0F);
  std::vector<float> rv(n, 0.0F);
  std::vector<float> none;
  adam_tensors rt{ref.data(), host_g.data(), dtype::f32,  rm.data(), rv.data(),
                  nullptr,    nullptr,       dtype::bf16, n};
  ASSERT_TRUE(adam_step_host(*f.pool, rt, o, 1).ok());
  for (std::size_t i = 0; i < n; i += 997) {
    ASSERT_EQ(out[i], ref[i]) << i;
    ASSERT_NEAR(out[i], 1.0F - 1e-3F, 1e-6F) << i;
  }
  f.alloc.free_async(p, f.stream.native);
  f.alloc.free_async(g, f.stream.native);
  f.alloc.free_async(m, f.stream.native);
  f.alloc.free_async(v, f.stream.native);
}

TEST(StreamKernels, CastPackScaleAndAxpyKeepStreamOrder) {
  sim_fixture f;
  device& dev = f.alloc.dev();
  constexpr std::size_t n = 128 << 10;
  const std::size_t bytes = n * sizeof(float);
  auto* x = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  auto* y = static_cast<float*>(f.alloc.malloc_async(bytes, f.stream.native));
  auto* flat = static_cast<unsigned char*>(f.alloc.malloc_async(2 * bytes, f.stream.native));
  auto* half = static_cast<std::uint16_t*>(f.alloc.malloc_async(n * 2, f.stream.native));
  std::vector<float> hx(n);
  std::vector<float> hy(n);
  for (std::size_t i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i % 100);
    hy[i] = 1.0F;
  }
  const auto h2d = copy_direction::host_to_device;
  ASSERT_TRUE(dev.copy_async(x, hx.data(), bytes, h2d, f.stream).ok());
  ASSERT_TRUE(dev.copy_async(y, hy.data(), bytes, h2d, f.stream).ok());
  ASSERT_TRUE(f.kernels.axpy(f.stream, y, 2.0F, x, n).ok());        // y = 1 + 2x
  ASSERT_TRUE(f.kernels.scale(f.stream, y, 0.5F, n).ok());          // y = 0.5 + x
  const pack_entry entries[] = {{x, bytes, bytes}, {y, bytes, 0}};  // flat = [y | x]
  ASSERT_TRUE(f.kernels.pack(f.stream, entries, 2, flat, 2 * bytes).ok());
  ASSERT_TRUE(f.kernels.cast_copy(f.stream, half, dtype::bf16, flat, dtype::f32, n).ok());
  std::vector<float> back(2 * n);
  std::vector<std::uint16_t> hb(n);
  const auto d2h = copy_direction::device_to_host;
  ASSERT_TRUE(dev.copy_async(back.data(), flat, 2 * bytes, d2h, f.stream).ok());
  ASSERT_TRUE(dev.copy_async(hb.data(), half, n * 2, d2h, f.stream).ok());
  ASSERT_TRUE(dev.synchronize_stream(f.stream).ok());
  for (std::size_t i = 0; i < n; i += 101) {
    ASSERT_EQ(back[i], 0.5F + hx[i]) << "y in the pack, " << i;
    ASSERT_EQ(back[n + i], hx[i]) << "x in the pack, " << i;
    float widened = 0;
    const std::uint32_t bits = std::uint32_t{hb[i]} << 16;
    std::memcpy(&widened, &bits, 4);
    ASSERT_NEAR(widened, 0.5F + hx[i], (0.5F + hx[i]) / 128) << "bf16 of y, " << i;
  }
  for (void* q : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(flat),
                  static_cast<void*>(half)}) {
    f.alloc.free_async(q, f.stream.native);
  }
}

TEST(StreamKernels, BadArgumentsAndUnknownStreamsAreRefusedAtTheCall) {
  sim_fixture f;
  std::vector<float> buf(16, 1.0F);
  EXPECT_EQ(f.kernels.scale(f.stream, nullptr, 1.0F, 4).code(), errc::invalid_argument);
  adam_tensors t{buf.data(), buf.data(), dtype::f32,  buf.data(), buf.data(),
                 nullptr,    nullptr,    dtype::bf16, 4};
  EXPECT_EQ(f.kernels.adam_step(f.stream, t, {}, 1).code(), errc::invalid_argument);
  const status unknown =
      f.kernels.scale(stream_handle{reinterpret_cast<void*>(0xbad)}, buf.data(), 2.0F, 4);
  EXPECT_FALSE(unknown.ok()) << "a stream the device does not know";
  ASSERT_TRUE(f.alloc.dev().synchronize().ok());
  for (float v : buf) EXPECT_EQ(v, 1.0F) << "a refused kernel ran";
}

// On a timing-only device a kernel computes nothing and takes its modeled
// cost: the bytes it reads and writes at the memory rate (1 GB/s here).
TEST(StreamKernels, OnATimingOnlyDeviceKernelsTakeTheirBytesAtTheMemoryRate) {
  allocator alloc =
      allocator::from_conf("device:sim:capacity=256MiB,data=none,driver_costs=none,d2d_gbps=1");
  const stream_handle stream = *alloc.dev().create_stream();
  std::unique_ptr<kernel_pool> pool = std::move(*kernel_pool::create(1));
  stream_kernels kernels{alloc.dev(), *pool};
  const std::size_t n = 1 << 20;
  auto* x = static_cast<float*>(alloc.malloc(n * sizeof(float)));
  auto* y = static_cast<float*>(alloc.malloc(n * sizeof(float)));
  auto* m = static_cast<float*>(alloc.malloc(n * sizeof(float)));
  auto* v = static_cast<float*>(alloc.malloc(n * sizeof(float)));
  auto* half = alloc.malloc(n * 2);
  ASSERT_TRUE(kernels.axpy(stream, y, 2.0F, x, n).ok());  // 12 bytes an element
  ASSERT_TRUE(kernels.cast_copy(stream, half, dtype::bf16, x, dtype::f32, n).ok());  // 6
  adam_tensors t{x, half, dtype::bf16, m, v, nullptr, nullptr, dtype::bf16, n};
  ASSERT_TRUE(kernels.adam_step(stream, t, {}, 1).ok());  // 6 x 4 + 2 = 26
  ASSERT_TRUE(alloc.dev().synchronize_stream(stream).ok());
  EXPECT_NEAR(*alloc.dev().modeled_clock(), (12.0 + 6 + 26) * n / 1e9, 1e-12);
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(m),
                  static_cast<void*>(v), half}) {
    alloc.free(p);
  }
  ASSERT_TRUE(alloc.dev().destroy_stream(stream).ok());
}

}  // namespace
}  // namespace strata
