// The stand-in's modules and kernel launches (see fake_driver.hpp).
#include <cstring>
#include <memory>

#include "fake_driver.hpp"
#include "host_runners.hpp"
#include "kernel_arguments.hpp"
#include "strata/kernels.hpp"

namespace fakecuda {

namespace {

// The fatbin header: magic, version, header size, size of what follows.
constexpr std::uint32_t fatbin_magic = 0xBA55ED50U;
struct fatbin_header {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t header_size;
  std::uint64_t fat_size;
};

strata::kernel_pool& pool() {
  static const std::unique_ptr<strata::kernel_pool> p = std::move(*strata::kernel_pool::create(2));
  return *p;
}

// One launch of a Strata kernel, run by the stream as a host function.
struct queued_launch {
  queued_launch() = default;
  queued_launch(const queued_launch&) = delete;
  queued_launch& operator=(const queued_launch&) = delete;
  queued_launch(queued_launch&&) = delete;
  queued_launch& operator=(queued_launch&&) = delete;
  virtual ~queued_launch() = default;
  virtual void run() = 0;
};

template <class Args>
struct launch final : queued_launch {
  Args args{};
  void (*body)(strata::kernel_pool&, const Args&) = nullptr;
  void run() override { body(pool(), args); }
};

void run_launch(void* data) {
  const std::unique_ptr<queued_launch> l(static_cast<queued_launch*>(data));
  l->run();
}

// The launch of a kernel taking one `Args`, its value copied from params[0].
template <class Args>
std::unique_ptr<queued_launch> prepare(void** params,
                                       void (*body)(strata::kernel_pool&, const Args&)) {
  auto l = std::make_unique<launch<Args>>();
  std::memcpy(&l->args, params[0], sizeof(Args));
  l->body = body;
  return l;
}

}  // namespace

CUresult fake_driver::module_load_data(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fatbin_header h{};
  std::memcpy(&h, image, sizeof h);
  if (h.magic != fatbin_magic || h.header_size < sizeof h || h.fat_size == 0 ||
      h.fat_size > (std::uint64_t{1} << 30)) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto m = std::make_unique<CUmod_st>();
  m->ordinal = current_ordinal();
  m->image.assign(static_cast<const char*>(image), h.header_size + h.fat_size);
  std::lock_guard lock(mu_);
  *module = m.get();
  modules_.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

CUresult fake_driver::module_unload(CUmodule module) {
  std::lock_guard lock(mu_);
  if (modules_.erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  std::erase_if(functions_, [&](const auto& f) { return f.second->module == module; });
  return CUDA_SUCCESS;
}

CUresult fake_driver::module_get_function(CUfunction* fn, CUmodule module, const char* name) {
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  auto it = modules_.find(module);
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  // A kernel's name is in the (uncompressed) image as a NUL-terminated string.
  if (it->second->image.find(std::string(name) + '\0') == std::string::npos) {
    return CUDA_ERROR_NOT_FOUND;
  }
  auto f = std::make_unique<CUfunc_st>(CUfunc_st{module, name});
  *fn = f.get();
  functions_.emplace(f.get(), std::move(f));
  return CUDA_SUCCESS;
}

CUresult fake_driver::launch_kernel(CUfunction f, unsigned grid_dim_x, unsigned block_dim_x,
                                    unsigned extra_dims, unsigned shared_bytes, CUstream stream,
                                    void** params, void** extra) {
  if (grid_dim_x == 0 || block_dim_x == 0 || block_dim_x > 1024 || extra_dims != 1 ||
      shared_bytes > 48 * 1024 || extra != nullptr || params == nullptr || params[0] == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string name;
  {
    std::lock_guard lock(mu_);
    auto it = functions_.find(f);
    if (it == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
    name = it->second->name;
  }
  strata::stream_handle h;
  gpu* g = stream_gpu(stream, h);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  namespace k = strata::kernels;
  std::unique_ptr<queued_launch> work;
  if (name == "strata_adam") {
    work = prepare<k::adam_args>(params, &k::run_adam);
  } else if (name == "strata_cast") {
    work = prepare<k::cast_args>(params, &k::run_cast);
  } else if (name == "strata_pack") {
    work = prepare<k::pack_args>(params, &k::run_pack);
  } else if (name == "strata_axpy") {
    work = prepare<k::axpy_args>(params, &k::run_axpy);
  } else {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const CUresult r = to_result(g->sim->launch_host_fn(h, &run_launch, work.get()));
  if (r == CUDA_SUCCESS) (void)work.release();  // run_launch owns it now
  return r;
}

}  // namespace fakecuda
