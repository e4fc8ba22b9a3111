#include "call_log.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace fakecuda {

namespace {

struct known_result {
  CUresult code;
  const char* name;
  const char* text;
};

// The results the stand-in returns, with the driver's names.
constexpr std::array<known_result, 19> known{{
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
}};

const known_result* find(CUresult r) {
  const auto* it =
      std::find_if(known.begin(), known.end(), [r](const known_result& k) { return k.code == r; });
  return it == known.end() ? nullptr : it;
}

}  // namespace

const char* result_name(CUresult r) {
  const known_result* k = find(r);
  return k == nullptr ? nullptr : k->name;
}

const char* result_text(CUresult r) {
  const known_result* k = find(r);
  return k == nullptr ? nullptr : k->text;
}

CUresult call_log::begin(const char* name) {
  std::lock_guard lock(mu_);
  ++total_;
  ++counts_[name];
  auto it = injections_.find(name);
  if (it == injections_.end() || --it->second.remaining > 0) return CUDA_SUCCESS;
  const CUresult r = it->second.result;
  injections_.erase(it);
  return r;
}

void call_log::end(const char* name, std::string args, CUresult result) {
  std::lock_guard lock(mu_);
  if (recent_.size() == keep) recent_.pop_front();
  recent_.push_back({name, std::move(args), result});
}

unsigned long long call_log::count(const char* name) {
  std::lock_guard lock(mu_);
  if (name == nullptr) return total_;
  auto it = counts_.find(name);
  return it == counts_.end() ? 0 : it->second;
}

void call_log::reset() {
  std::lock_guard lock(mu_);
  total_ = 0;
  counts_.clear();
  injections_.clear();
  recent_.clear();
}

void call_log::fail_at(const std::string& name, unsigned long long nth, CUresult result) {
  std::lock_guard lock(mu_);
  injections_[name] = {nth, result};
}

std::string call_log::format(std::size_t last) {
  std::lock_guard lock(mu_);
  std::string out;
  const std::size_t from = recent_.size() > last ? recent_.size() - last : 0;
  for (std::size_t i = from; i < recent_.size(); ++i) {
    const record& r = recent_[i];
    const char* result = result_name(r.result);
    out += std::string(r.name) + "(" + r.args + ") -> " +
           (result != nullptr ? result : "CUresult " + std::to_string(r.result)) + "\n";
  }
  return out;
}

call_log& calls() {
  static call_log log;
  return log;
}

}  // namespace fakecuda
