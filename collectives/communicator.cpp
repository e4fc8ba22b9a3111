// The communicator's public calls: argument checks once, here, before an
// implementation sees the call (as device.cpp does for the devices).
#include "strata/communicator.hpp"

#include <limits>
#include <string>

namespace strata {

namespace {

bool known(dtype t) {
  return t == dtype::f32 || t == dtype::bf16 || t == dtype::f16;
}

bool known(reduce_op op) {
  return op == reduce_op::sum || op == reduce_op::avg;
}

bool overlaps(std::uintptr_t a, std::size_t a_bytes, std::uintptr_t b, std::size_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

}  // namespace

const char* collective_name(collective c) noexcept {
  switch (c) {
    case collective::all_reduce:
      return "all_reduce";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::all_gather:
      return "all_gather";
    case collective::broadcast:
      return "broadcast";
  }
  return "unknown collective";
}

communicator::communicator(device& dev, int rank, int size) : dev_(dev), rank_(rank), size_(size) {}

communicator::~communicator() = default;

status communicator::all_reduce(const void* send, void* recv, std::size_t count, dtype type,
                                reduce_op op, stream_handle stream) {
  return submit({collective::all_reduce, send, recv, count, type, op, 0, stream});
}

status communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                    dtype type, reduce_op op, stream_handle stream) {
  return submit({collective::reduce_scatter, send, recv, recv_count, type, op, 0, stream});
}

status communicator::all_gather(const void* send, void* recv, std::size_t send_count, dtype type,
                                stream_handle stream) {
  return submit({collective::all_gather, send, recv, send_count, type, reduce_op::sum, 0, stream});
}

status communicator::broadcast(const void* send, void* recv, std::size_t count, dtype type,
                               int root, stream_handle stream) {
  return submit({collective::broadcast, send, recv, count, type, reduce_op::sum, root, stream});
}

status communicator::submit(const collective_call& call) {
  if (auto failed = async_error(); !failed) return failed;
  const auto refuse = [&](const std::string& why) {
    status s{errc::invalid_argument, std::string(collective_name(call.kind)) + " on rank " +
                                         std::to_string(rank_) + ": " + why};
    do_call_failed(call, s);
    return s;
  };
  if (!known(call.type)) return refuse("unknown dtype");
  if (!known(call.op)) return refuse("unknown reduction");
  if (call.kind == collective::broadcast && (call.root < 0 || call.root >= size_)) {
    return refuse("root " + std::to_string(call.root) + " is not a rank of " +
                  std::to_string(size_));
  }
  const std::size_t per_rank = std::numeric_limits<std::size_t>::max() / dtype_size(call.type) /
                               static_cast<std::size_t>(size_);
  if (call.count > per_rank) {
    return refuse("count " + std::to_string(call.count) + " overflows the buffer size");
  }
  if (call.count > 0) {
    const bool send_needed = call.kind != collective::broadcast || call.root == rank_;
    if ((send_needed && call.send == nullptr) || call.recv == nullptr) {
      return refuse("null buffer for " + std::to_string(call.count) + " elements");
    }
  }
  return do_collective(call);
}

status communicator::group_start() {
  return do_group_start();
}

status communicator::group_end() {
  return do_group_end();
}

result<std::uint64_t> communicator::register_buffer(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return status{errc::invalid_argument, "register_buffer: null pointer or zero size"};
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (begin + bytes < begin) return status{errc::invalid_argument, "register_buffer: range wraps"};
  for (const registration& r : registered_) {
    if (overlaps(begin, bytes, r.begin, r.bytes)) {
      return status{errc::invalid_argument,
                    "register_buffer: the range overlaps registration " + std::to_string(r.handle)};
    }
  }
  if (auto s = do_register(ptr, bytes); !s) return s;
  registered_.push_back({next_registration_, begin, bytes});
  return next_registration_++;
}

status communicator::deregister_buffer(std::uint64_t handle) {
  for (auto it = registered_.begin(); it != registered_.end(); ++it) {
    if (it->handle != handle) continue;
    if (auto s = do_deregister(reinterpret_cast<void*>(it->begin)); !s) return s;
    registered_.erase(it);
    return {};
  }
  return {errc::invalid_argument,
          "deregister_buffer: " + std::to_string(handle) + " is not a registration"};
}

std::size_t communicator::registered_bytes() const {
  std::size_t total = 0;
  for (const registration& r : registered_) total += r.bytes;
  return total;
}

}  // namespace strata
