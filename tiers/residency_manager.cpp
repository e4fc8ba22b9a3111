// The residency manager's interface (strata/residency.hpp) over its core
// (residency_core.hpp), which does the work: each call forwards.
#include "strata/residency.hpp"

#include <utility>

#include "residency_core.hpp"

namespace strata {

result<std::unique_ptr<residency_manager>> residency_manager::create(allocator& alloc,
                                                                     const tier_options& options,
                                                                     io_faults* nvme_faults) {
  auto core = residency_core::create(alloc, options, nvme_faults);
  if (!core) return core.error();
  return std::unique_ptr<residency_manager>(new residency_manager(std::move(*core)));
}

residency_manager::residency_manager(std::unique_ptr<residency_core> core)
    : core_(std::move(core)) {}

residency_manager::~residency_manager() = default;

result<std::uint64_t> residency_manager::register_buffer(std::size_t bytes, buffer_kind kind,
                                                         residency_policy policy) {
  return core_->register_buffer(bytes, kind, policy);
}

result<void*> residency_manager::acquire(std::uint64_t handle, void* stream, access_mode mode) {
  return core_->acquire(handle, stream, mode);
}

status residency_manager::release(std::uint64_t handle, void* stream) {
  return core_->release(handle, stream);
}

result<void*> residency_manager::acquire_host(std::uint64_t handle, access_mode mode) {
  return core_->acquire_host(handle, mode);
}

status residency_manager::release_host(std::uint64_t handle) {
  return core_->release_host(handle);
}

status residency_manager::unregister(std::uint64_t handle) {
  return core_->unregister(handle);
}

result<tier> residency_manager::where(std::uint64_t handle) {
  return core_->where(handle);
}

result<std::size_t> residency_manager::size_of(std::uint64_t handle) {
  return core_->size_of(handle);
}

result<prefetch_outcome> residency_manager::prefetch(std::uint64_t handle, tier to,
                                                     std::uint64_t next_use,
                                                     prefetch_limits limits) {
  return core_->prefetch(handle, to, next_use, limits);
}

void residency_manager::wait_for_reads() {
  core_->wait_for_reads();
}

void residency_manager::set_eviction_oracle(
    std::function<std::uint64_t(std::uint64_t handle)> next_use, std::uint64_t keep_within) {
  core_->set_eviction_oracle(std::move(next_use), keep_within);
}

std::size_t residency_manager::spill(std::size_t bytes) {
  return core_->spill(bytes);
}

residency_manager::counters residency_manager::stats() {
  return core_->stats();
}

allocator& residency_manager::device_allocator() const noexcept {
  return core_->device_allocator();
}

std::uint64_t residency_manager::host_lookahead() const noexcept {
  return core_->host_lookahead();
}

std::uint64_t residency_manager::host_capacity() const noexcept {
  return core_->host_capacity();
}

}  // namespace strata
