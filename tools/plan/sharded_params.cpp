#include "plan/sharded_params.hpp"

#include <algorithm>
#include <cstdint>

#include "strata/strata.hpp"

namespace strata::plan {

offload_settings plan_offload_options(const std::vector<std::size_t>& shard_bytes,
                                      std::uint64_t ranks, offload_to where, double nvme_gbps) {
  std::uint64_t largest = 1;
  std::uint64_t smallest = ~std::uint64_t{0};
  for (const std::size_t b : shard_bytes) {
    largest = std::max<std::uint64_t>(largest, b * ranks);
    smallest = std::min<std::uint64_t>(smallest, std::max<std::uint64_t>(b * ranks, 1));
  }
  constexpr std::uint64_t mib = 1ULL << 20;  // whole MiB: readable in STRATA_CONF
  offload_settings o;
  o.prefetch.prefetch_bytes = (largest + mib - 1) / mib * mib;
  o.prefetch.device_lookahead = smallest >= mib ? smallest / mib * mib : smallest;
  if (where == offload_to::nvme) {
    // A host tier of three of the largest shards (a read in flight, the
    // staging chunks, at most a quarter of it each, and room to spare):
    // the shards live on the (modeled) NVMe tier and pass through it.
    const std::size_t shard = *std::max_element(shard_bytes.begin(), shard_bytes.end());
    o.tiers.host_capacity = 3 * std::max<std::uint64_t>(shard, mib);
    o.tiers.nvme_model = true;
    o.tiers.nvme_model_gbps = nvme_gbps;
    o.tiers.nvme_write_behind = false;
  }
  return o;
}

sharded_params::sharded_params(allocator& alloc, communicator* group, stream_handle comm_stream,
                               const std::vector<std::size_t>& shard_bytes, dtype type,
                               offload_to where, double nvme_gbps) {
  const std::uint64_t ranks = group != nullptr ? static_cast<std::uint64_t>(group->size()) : 1;
  const offload_settings o = plan_offload_options(shard_bytes, ranks, where, nvme_gbps);
  manager_ = value_or_throw(residency_manager::create(alloc, o.tiers));
  fetch_ = value_or_throw(prefetcher::create(*manager_, o.prefetch));
  const residency_policy policy = where == offload_to::none   ? residency_policy::pinned_on_device
                                  : where == offload_to::host ? residency_policy::host_only
                                                              : residency_policy::evictable;
  for (const std::size_t bytes : shard_bytes) {
    const std::uint64_t h = value_or_throw(
        manager_->register_buffer(std::max<std::size_t>(bytes, 1), buffer_kind::parameter, policy));
    handles_.push_back(h);
    // The shard's bytes (a timing-only device stores none): written once,
    // on the device; offloaded, they are spilled to the host below.
    value_or_throw(manager_->acquire(h, comm_stream.native));
    throw_if_error(manager_->release(h, comm_stream.native));
    if (group != nullptr) throw_if_error(fetch_->add_sharded(h, *group, comm_stream, type));
  }
  if (where != offload_to::none) manager_->spill(SIZE_MAX);
}

sharded_params::~sharded_params() {
  fetch_.reset();
  for (const std::uint64_t h : handles_) (void)manager_->unregister(h);
}

void sharded_params::begin_step() {
  throw_if_error(fetch_->begin_step());
}

void sharded_params::end_step() {
  throw_if_error(fetch_->end_step());
}

void sharded_params::acquire(std::size_t u, stream_handle stream) {
  value_or_throw(fetch_->acquire(handles_.at(u), stream.native, access_mode::read_only));
}

void sharded_params::release(std::size_t u, stream_handle stream) {
  throw_if_error(fetch_->release(handles_.at(u), stream.native));
}

void sharded_params::update(std::size_t u, stream_handle stream, const void* host) {
  const std::uint64_t h = handles_.at(u);
  const std::size_t bytes = value_or_throw(manager_->size_of(h));
  void* shard = value_or_throw(manager_->acquire(h, stream.native, access_mode::read_write));
  device& dev = manager_->device_allocator().dev();
  const status copied = dev.copy_async(shard, host, bytes, copy_direction::host_to_device, stream);
  throw_if_error(manager_->release(h, stream.native));
  throw_if_error(copied);
}

void sharded_params::wait_for_reads() {
  manager_->wait_for_reads();
}

prefetcher::counters sharded_params::stats() {
  return fetch_->stats();
}

}  // namespace strata::plan
