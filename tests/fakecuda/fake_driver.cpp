// Initialisation, devices and primary contexts of the stand-in driver, and
// its configuration from the environment:
//   FAKECUDA_DEVICES         number of GPUs (default 1; 0: cuInit fails
//                            with CUDA_ERROR_NO_DEVICE)
//   FAKECUDA_CAPACITY        memory per GPU, e.g. 64MiB (default 80GiB)
//   FAKECUDA_DRIVER_VERSION  what cuDriverGetVersion reports (default 13000)
#include "fake_driver.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fakecuda {

namespace {

// Initial-exec: in the static TLS block, not the dynamic TLS of a dlopened
// library, which clang 14's LeakSanitizer misreads under newer glibc and
// crashes at exit walking (one pointer fits the static TLS surplus).
[[gnu::tls_model("initial-exec")]] thread_local CUctx_st* current_ctx = nullptr;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before threads use it
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

std::string default_options() {
  const char* v = std::getenv("FAKECUDA_CAPACITY");  // NOLINT(concurrency-mt-unsafe)
  return std::string("capacity=") + (v != nullptr && *v != '\0' ? v : "80GiB");
}

std::unique_ptr<strata::sim_device> make_sim(const std::string& options) {
  auto config = strata::parse_sim_config(options);
  if (!config) return nullptr;
  auto sim = strata::sim_device::create(*config);
  return sim ? std::move(*sim) : nullptr;
}

}  // namespace

CUresult to_result(const strata::status& s) {
  switch (s.code()) {
    case strata::errc::ok:
      return CUDA_SUCCESS;
    case strata::errc::invalid_argument:
      return CUDA_ERROR_INVALID_VALUE;
    case strata::errc::out_of_memory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

fake_driver& fake_driver::get() {
  static fake_driver driver;
  return driver;
}

fake_driver::fake_driver() {
  const int count = env_int("FAKECUDA_DEVICES", 1);
  const std::string options = default_options();
  for (int i = 0; i < count; ++i) {
    gpu g;
    g.sim = make_sim(options);
    g.primary = std::make_unique<CUctx_st>(CUctx_st{i});
    gpus_.push_back(std::move(g));
  }
}

CUresult fake_driver::check(needs n) {
  if (n == needs::nothing) return CUDA_SUCCESS;
  std::lock_guard lock(mu_);
  if (!initialised_) return CUDA_ERROR_NOT_INITIALIZED;
  if (n == needs::init) return CUDA_SUCCESS;
  if (current_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (gpus_[static_cast<std::size_t>(current_ctx->ordinal)].retains == 0) {
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  return CUDA_SUCCESS;
}

fake_driver::gpu& fake_driver::current() {
  std::lock_guard lock(mu_);
  return gpus_[static_cast<std::size_t>(current_ctx->ordinal)];
}

int fake_driver::current_ordinal() {
  return current_ctx->ordinal;
}

CUresult fake_driver::init(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (gpus_.empty()) return CUDA_ERROR_NO_DEVICE;
  for (const gpu& g : gpus_) {
    if (g.sim == nullptr) return CUDA_ERROR_UNKNOWN;  // a bad FAKECUDA_CAPACITY
  }
  initialised_ = true;
  return CUDA_SUCCESS;
}

CUresult fake_driver::driver_version(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = env_int("FAKECUDA_DRIVER_VERSION", 13000);
  return CUDA_SUCCESS;
}

CUresult fake_driver::device_count(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  *count = static_cast<int>(gpus_.size());
  return CUDA_SUCCESS;
}

CUresult fake_driver::device_get(CUdevice* dev, int ordinal) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (ordinal < 0 || ordinal >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_driver::device_name(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  const std::string text = "Strata stand-in GPU " + std::to_string(dev);
  const std::size_t n = std::min(text.size(), static_cast<std::size_t>(len) - 1);
  std::memcpy(name, text.data(), n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

CUresult fake_driver::primary_retain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  gpu& g = gpus_[static_cast<std::size_t>(dev)];
  ++g.retains;
  *ctx = g.primary.get();
  return CUDA_SUCCESS;
}

CUresult fake_driver::primary_release(CUdevice dev) {
  std::lock_guard lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  gpu& g = gpus_[static_cast<std::size_t>(dev)];
  if (g.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --g.retains;
  return CUDA_SUCCESS;
}

CUresult fake_driver::ctx_get_current(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current_ctx;
  return CUDA_SUCCESS;
}

CUresult fake_driver::ctx_get_device(CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = current_ctx->ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_driver::ctx_set_current(CUcontext ctx) {
  if (ctx == nullptr) {
    current_ctx = nullptr;
    return CUDA_SUCCESS;
  }
  std::lock_guard lock(mu_);
  for (const gpu& g : gpus_) {
    if (g.primary.get() == ctx) {
      if (g.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
      current_ctx = ctx;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

CUresult fake_driver::ctx_synchronize() {
  return to_result(current().sim->synchronize());
}

int fake_driver::configure(int ordinal, const char* sim_options) {
  if (sim_options == nullptr) return -1;
  std::lock_guard lock(mu_);
  if (ordinal < 0 || ordinal >= static_cast<int>(gpus_.size())) return -1;
  gpu& g = gpus_[static_cast<std::size_t>(ordinal)];
  if (g.retains > 0) return -1;
  const auto mine = [ordinal](const auto& entry) { return entry.second.ordinal == ordinal; };
  const auto on_gpu = [ordinal](const auto& entry) { return entry.second == ordinal; };
  if (std::any_of(handles_.begin(), handles_.end(), mine) ||
      std::any_of(reservations_.begin(), reservations_.end(), mine) ||
      std::any_of(streams_.begin(), streams_.end(), on_gpu) ||
      std::any_of(events_.begin(), events_.end(), on_gpu) ||
      std::any_of(allocations_.begin(), allocations_.end(), mine)) {
    return -1;
  }
  auto sim = make_sim(sim_options);
  if (sim == nullptr) return -1;
  g.sim = std::move(sim);
  return 0;
}

unsigned long long fake_driver::live_objects() {
  std::lock_guard lock(mu_);
  return handles_.size() + reservations_.size() + streams_.size() + events_.size() + host_objects_ +
         modules_.size();
}

int fake_driver::backing_allocations(std::uintptr_t va, std::size_t bytes, int* ordinal) {
  if (va == 0 || bytes == 0) return 0;
  std::lock_guard lock(mu_);
  // Plain allocations first: one block backs the whole range or none of it.
  if (auto a = allocations_.upper_bound(va); a != allocations_.begin()) {
    --a;
    if (va >= a->first && va + bytes <= a->first + a->second.bytes) {
      if (ordinal != nullptr) *ordinal = a->second.ordinal;
      return 1;
    }
  }
  // Mappings: walk them in address order, with no gap between them.
  auto m = mappings_.upper_bound(va);
  if (m == mappings_.begin()) return 0;
  --m;
  int count = 0;
  int owner = -1;
  CUmemGenericAllocationHandle last = 0;
  for (std::uintptr_t at = va; at < va + bytes; ++m) {
    if (m == mappings_.end() || m->first > at || m->first + m->second.bytes <= at) return 0;
    const int gpu_of = handles_.at(m->second.handle).ordinal;
    if (owner >= 0 && gpu_of != owner) return 0;
    owner = gpu_of;
    if (m->second.handle != last) ++count;
    last = m->second.handle;
    at = m->first + m->second.bytes;
  }
  if (ordinal != nullptr) *ordinal = owner;
  return count;
}

}  // namespace fakecuda
