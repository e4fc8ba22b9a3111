// Scale (x *= a) and accumulate (y += a * x) over fp32 on the host: the
// gradient averaging and accumulation steps. Memory bound; vectorized.
#include "argument_checks.hpp"
#include "host_runners.hpp"
#include "strata/kernels.hpp"

namespace strata {

namespace kernels {

namespace {

void scale_part(void* context, std::size_t begin, std::size_t end) {
  const auto& job = *static_cast<const axpy_args*>(context);
  float* __restrict y = job.y;
  for (std::size_t i = begin; i < end; ++i) y[i] = y[i] * job.a;
}

void axpy_part(void* context, std::size_t begin, std::size_t end) {
  const auto& job = *static_cast<const axpy_args*>(context);
  float* y = job.y;
  const float* x = job.x;  // may be y itself: each element is read before it is written
  for (std::size_t i = begin; i < end; ++i) y[i] = y[i] + job.a * x[i];
}

}  // namespace

void run_axpy(kernel_pool& pool, const axpy_args& a) {
  axpy_args copy = a;
  pool.parallel_for(a.count, std::size_t{32} << 10, a.x == nullptr ? &scale_part : &axpy_part,
                    &copy);
}

status check_axpy(const char* kernel, float* y, const float* x, std::size_t count) {
  if (count == 0) return {};
  if (!count_fits(count, dtype::f32)) return invalid(kernel, "count too large");
  if (y == nullptr || x == nullptr) return invalid(kernel, "null buffer");
  if (x != y && overlaps(y, count * sizeof(float), x, count * sizeof(float))) {
    return invalid(kernel, "x and y overlap");
  }
  return {};
}

}  // namespace kernels

status scale_host(kernel_pool& pool, float* x, float a, std::size_t count) {
  if (auto s = kernels::check_axpy("scale", x, x, count); !s) return s;
  kernels::run_axpy(pool, {x, nullptr, count, a});
  return {};
}

status axpy_host(kernel_pool& pool, float* y, float a, const float* x, std::size_t count) {
  if (auto s = kernels::check_axpy("axpy", y, x, count); !s) return s;
  kernels::run_axpy(pool, {y, x, count, a});
  return {};
}

}  // namespace strata
