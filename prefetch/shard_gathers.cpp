// Invariants: a parameter holds `full` iff it is gathered (queued), kept or
// in use; `ahead` implies held and acquired == 0; ahead_bytes_ is the sum of
// full_bytes over the parameters with `ahead`; c_.gathered_bytes the sum
// over those holding `full`.
#include "shard_gathers.hpp"

#include <limits>
#include <string>

namespace strata {

namespace {

status invalid(std::uint64_t handle, const std::string& why) {
  return {errc::invalid_argument,
          "prefetcher: sharded parameter " + std::to_string(handle) + ": " + why};
}

}  // namespace

shard_gathers::shard_gathers(residency_manager& buffers, allocator& alloc)
    : buffers_(buffers), alloc_(alloc) {}

shard_gathers::~shard_gathers() {
  device& dev = alloc_.dev();
  for (auto& [handle, p] : params_) {
    (void)dev.synchronize_stream(p.stream);
    if (p.full != nullptr) (void)alloc_.try_free_async(p.full, p.stream.native);
    (void)dev.destroy_event(p.gathered);
  }
}

status shard_gathers::add(std::uint64_t handle, communicator& comm, stream_handle comm_stream,
                          dtype type) {
  if (params_.contains(handle)) return invalid(handle, "already registered as sharded");
  auto bytes = buffers_.size_of(handle);
  if (!bytes) return bytes.error();
  if (*bytes % dtype_size(type) != 0) {
    return invalid(handle, "its shard of " + std::to_string(*bytes) +
                               " bytes is not whole elements of its dtype");
  }
  const auto ranks = static_cast<std::size_t>(comm.size());
  if (*bytes > std::numeric_limits<std::size_t>::max() / ranks) {
    return invalid(handle, "the full parameter's size overflows");
  }
  auto event = alloc_.dev().create_event();
  if (!event) return event.error();
  params_.emplace(handle, sharded{&comm, comm_stream, type, *bytes, *event});
  return {};
}

std::size_t shard_gathers::full_bytes(std::uint64_t handle) const {
  const auto it = params_.find(handle);
  if (it == params_.end()) return 0;
  return it->second.shard_bytes * static_cast<std::size_t>(it->second.comm->size());
}

bool shard_gathers::waiting(std::uint64_t handle) const {
  const auto it = params_.find(handle);
  return it != params_.end() && it->second.full != nullptr && it->second.acquired == 0;
}

bool shard_gathers::in_use(std::uint64_t handle) const {
  const auto it = params_.find(handle);
  return it != params_.end() && it->second.acquired > 0;
}

void shard_gathers::set_ahead(sharded& p, bool on) {
  if (p.ahead == on) return;
  p.ahead = on;
  const std::uint64_t bytes = p.shard_bytes * static_cast<std::uint64_t>(p.comm->size());
  ahead_bytes_ = on ? ahead_bytes_ + bytes : ahead_bytes_ - bytes;
}

status shard_gathers::gather(std::uint64_t handle, bool ahead) {
  sharded& p = params_.at(handle);
  const std::size_t full = p.shard_bytes * static_cast<std::size_t>(p.comm->size());
  const auto failed = [&](status why) {
    ++c_.gather_failures;
    return why;
  };
  auto shard = buffers_.acquire(handle, p.stream.native, access_mode::read_only);
  if (!shard) return failed(shard.error());
  // Whatever happens below, the shard is released on the stream its reads
  // were queued on.
  auto dest = alloc_.try_malloc_async(full, p.stream.native);
  if (!dest) {
    (void)buffers_.release(handle, p.stream.native);
    return failed(dest.error());
  }
  status s =
      p.comm->all_gather(*shard, *dest, p.shard_bytes / dtype_size(p.type), p.type, p.stream);
  if (s.ok()) s = alloc_.dev().record_event(p.gathered, p.stream);
  if (auto r = buffers_.release(handle, p.stream.native); s.ok()) s = std::move(r);
  if (!s.ok()) {
    (void)alloc_.try_free_async(*dest, p.stream.native);
    return failed(std::move(s));
  }
  p.full = *dest;
  c_.gathered_bytes += full;
  ++c_.gathers;
  if (ahead) {
    ++c_.gathers_ahead;
    set_ahead(p, true);
  }
  return {};
}

result<void*> shard_gathers::acquire(std::uint64_t handle, stream_handle stream) {
  sharded& p = params_.at(handle);
  if (p.full == nullptr) {
    if (auto s = gather(handle, false); !s) return s;
  } else if (!p.ahead && p.acquired == 0) {
    ++c_.gathers_reused;
  }
  if (auto s = alloc_.dev().stream_wait_event(stream, p.gathered); !s) return s;
  set_ahead(p, false);
  ++p.acquired;
  return p.full;
}

status shard_gathers::release(std::uint64_t handle, stream_handle stream, bool keep) {
  sharded& p = params_.at(handle);
  if (p.acquired == 0) return invalid(handle, "released more often than acquired");
  // The free below also waits for the work `stream` queued on the buffer.
  if (stream != p.stream) {
    try {
      alloc_.record_stream(p.full, stream.native);
    } catch (const error& e) {
      return e.to_status();
    }
  }
  if (--p.acquired > 0 || keep) return {};
  return reshard(p);
}

status shard_gathers::reshard(sharded& p) {
  set_ahead(p, false);
  const std::uint64_t full = p.shard_bytes * static_cast<std::uint64_t>(p.comm->size());
  void* buffer = p.full;
  p.full = nullptr;
  c_.gathered_bytes -= full;
  ++c_.reshards;
  return alloc_.try_free_async(buffer, p.stream.native);
}

status shard_gathers::forget(std::uint64_t handle) {
  auto it = params_.find(handle);
  if (it == params_.end()) return {};
  sharded& p = it->second;
  if (p.acquired > 0) return invalid(handle, "unregistered while its full buffer is acquired");
  status freed;
  if (p.full != nullptr) freed = reshard(p);
  // The event may still be waited on by queued work: destroy it once the
  // communication stream is past the gather (a rare path: an unregister).
  (void)alloc_.dev().synchronize_stream(p.stream);
  (void)alloc_.dev().destroy_event(p.gathered);
  params_.erase(it);
  return freed;
}

status shard_gathers::reshard_held() {
  status first;
  for (auto& [handle, p] : params_) {
    if (p.full == nullptr || p.acquired > 0) continue;
    if (auto s = reshard(p); !s && first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace strata
