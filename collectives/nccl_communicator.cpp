// The `nccl` communicator (strata/nccl.hpp): each call maps to the NCCL call
// of the same name on the call's stream. A watchdog thread follows what was
// queued: after each collective (or outermost group) an event is recorded on
// its stream; the watchdog polls the oldest event and NCCL's asynchronous
// error every millisecond while anything is pending, and aborts the
// communicator when an event is older than the timeout or NCCL reports an
// error.
//
// Invariants: `comm_` is live until `aborted_` is set (under call_mu_, which
// every NCCL call on the communicator holds); `failed_` (under state_mu_) is
// set once and never cleared. Watched events return to `spare_` once
// complete and are destroyed with the communicator.
//
// Cost: per queued collective one event record (from a pool); the watchdog
// sleeps while nothing is pending.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "nccl_library.hpp"
#include "strata/nccl.hpp"

namespace strata {
namespace {

using clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(dtype t) {
  switch (t) {
    case dtype::f32:
      return ncclFloat32;
    case dtype::f16:
      return ncclFloat16;
    case dtype::bf16:
      return ncclBfloat16;
  }
  return ncclFloat32;  // unreachable: the base class checked the dtype
}

ncclRedOp_t nccl_op(reduce_op op) {
  return op == reduce_op::avg ? ncclAvg : ncclSum;
}

class nccl_communicator final : public communicator {
 public:
  nccl_communicator(device& dev, int rank, int size, const nccl::library& lib, nccl::comm_t comm,
                    std::chrono::milliseconds timeout)
      : communicator(dev, rank, size), lib_(lib), comm_(comm), timeout_(timeout) {
    watchdog_ = std::thread([this] { watch(); });
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&&) = delete;
  nccl_communicator& operator=(nccl_communicator&&) = delete;

  ~nccl_communicator() override {
    {
      std::lock_guard lock(state_mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    std::lock_guard lock(call_mu_);
    if (!aborted_) {
      for (auto& [ptr, handle] : registrations_) (void)lib_.comm_deregister(comm_, handle);
      // Destroy waits for what is queued; a failed communicator is aborted.
      (void)(failed_.ok() ? lib_.comm_destroy(comm_) : lib_.comm_abort(comm_));
    }
    for (const watched& w : pending_) (void)dev().destroy_event(w.event);
    for (event_handle e : spare_) (void)dev().destroy_event(e);
  }

 private:
  struct watched {
    event_handle event;
    std::string what;
    clock::time_point deadline;
  };

  status do_collective(const collective_call& call) override {
    if (call.count == 0) return {};  // NCCL: nothing to do
    std::unique_lock lock(call_mu_);
    if (aborted_) return failed();
    const ncclDataType_t type = nccl_type(call.type);
    const ncclRedOp_t op = nccl_op(call.op);
    auto* stream = static_cast<cudaStream_t>(call.stream.native);
    nccl::result_t r = ncclSuccess;
    switch (call.kind) {
      case collective::all_reduce:
        r = lib_.all_reduce(call.send, call.recv, call.count, type, op, comm_, stream);
        break;
      case collective::reduce_scatter:
        r = lib_.reduce_scatter(call.send, call.recv, call.count, type, op, comm_, stream);
        break;
      case collective::all_gather:
        r = lib_.all_gather(call.send, call.recv, call.count, type, comm_, stream);
        break;
      case collective::broadcast:
        r = lib_.broadcast(call.send, call.recv, call.count, type, call.root, comm_, stream);
        break;
    }
    const std::string what = std::string(collective_name(call.kind)) + " #" +
                             std::to_string(next_seq_++) + " on rank " + std::to_string(rank());
    if (r != ncclSuccess) {
      status s = lib_.error(what, r, comm_);
      abort_with(s);
      return s;
    }
    if (group_depth_ > 0) {
      group_streams_.emplace_back(call.stream, what);
      return {};
    }
    return watch_stream(call.stream, what);
  }

  status do_group_start() override {
    std::lock_guard lock(call_mu_);
    if (aborted_) return failed();
    if (nccl::result_t r = lib_.group_start(); r != ncclSuccess)
      return lib_.error("group start", r, comm_);
    ++group_depth_;
    return {};
  }

  status do_group_end() override {
    std::unique_lock lock(call_mu_);
    if (group_depth_ == 0) return {errc::invalid_argument, "group_end without group_start"};
    --group_depth_;
    if (nccl::result_t r = lib_.group_end(); r != ncclSuccess) {
      status s = lib_.error("group end", r, comm_);
      abort_with(s);
      return s;
    }
    if (group_depth_ > 0) return {};
    auto streams = std::exchange(group_streams_, {});
    for (auto& [stream, what] : streams) {
      if (auto s = watch_stream(stream, what); !s) return s;
    }
    return {};
  }

  status do_register(void* ptr, std::size_t bytes) override {
    std::lock_guard lock(call_mu_);
    if (aborted_) return failed();
    if (lib_.comm_register == nullptr || lib_.comm_deregister == nullptr) {
      return {errc::not_supported, "nccl communicator: " + lib_.file + " is NCCL " +
                                       nccl::version_text(lib_.version) +
                                       "; buffer registration needs NCCL 2.19 or newer"};
    }
    void* handle = nullptr;
    if (nccl::result_t r = lib_.comm_register(comm_, ptr, bytes, &handle); r != ncclSuccess) {
      return lib_.error("ncclCommRegister of " + std::to_string(bytes) + " bytes", r, comm_);
    }
    registrations_[ptr] = handle;
    return {};
  }

  status do_deregister(void* ptr) override {
    std::lock_guard lock(call_mu_);
    auto it = registrations_.find(ptr);
    if (it == registrations_.end()) return {};
    if (!aborted_) {
      if (nccl::result_t r = lib_.comm_deregister(comm_, it->second); r != ncclSuccess) {
        return lib_.error("ncclCommDeregister", r, comm_);
      }
    }
    registrations_.erase(it);
    return {};
  }

  status do_async_error() const override {
    std::lock_guard lock(state_mu_);
    return failed_;
  }

  void do_call_failed(const collective_call& call, const status& why) override {
    std::lock_guard lock(call_mu_);
    abort_with({errc::comm_error, "nccl communicator: rank " + std::to_string(rank()) +
                                      " failed its " + collective_name(call.kind) +
                                      " call: " + why.to_string() +
                                      " (the communicator was aborted so the other ranks do not "
                                      "wait for it)"});
  }

  status failed() const {
    std::lock_guard lock(state_mu_);
    return failed_;
  }

  // Needs call_mu_. The first failure is kept.
  void abort_with(const status& why) {
    {
      std::lock_guard lock(state_mu_);
      if (failed_.ok()) failed_ = why;
    }
    if (!aborted_) {
      (void)lib_.comm_abort(comm_);
      aborted_ = true;
    }
  }

  // Needs call_mu_.
  status watch_stream(stream_handle stream, const std::string& what) {
    event_handle e{};
    {
      std::lock_guard lock(state_mu_);
      if (!spare_.empty()) {
        e = spare_.back();
        spare_.pop_back();
      }
    }
    if (e.native == nullptr) {
      auto made = dev().create_event();
      if (!made) return made.error();
      e = *made;
    }
    if (auto s = dev().record_event(e, stream); !s) {
      (void)dev().destroy_event(e);
      return s;
    }
    {
      std::lock_guard lock(state_mu_);
      pending_.push_back({e, what, clock::now() + timeout_});
    }
    wake_.notify_all();
    return {};
  }

  void watch() {
    std::unique_lock lock(state_mu_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      const watched oldest = pending_.front();
      lock.unlock();
      const yes_no done = dev().query_event(oldest.event);
      nccl::result_t async = ncclSuccess;
      std::string why;
      {
        std::lock_guard calls(call_mu_);
        if (!aborted_ && lib_.comm_get_async_error(comm_, &async) == ncclSuccess &&
            async != ncclSuccess) {
          why = lib_.error(oldest.what + " (asynchronous error)", async, comm_).message();
        } else if (done.ok() && !done.yes() && clock::now() > oldest.deadline) {
          why = "nccl communicator: " + oldest.what + " did not finish within " +
                std::to_string(timeout_.count()) +
                " ms (a rank that never made the call, or a hung device); the communicator was "
                "aborted";
        } else if (!done.ok()) {
          why = "nccl communicator: cannot query the event after " + oldest.what + ": " +
                done.error().to_string();
        }
        if (!why.empty()) abort_with({errc::comm_error, why});
      }
      lock.lock();
      if (done.ok() && done.yes()) {
        spare_.push_back(oldest.event);
        pending_.pop_front();
      } else if (!why.empty()) {
        // Failed: nothing further is watched (the events are freed at the end).
        while (!pending_.empty()) {
          spare_.push_back(pending_.front().event);
          pending_.pop_front();
        }
      } else {
        wake_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_; });
      }
    }
  }

  const nccl::library& lib_;
  nccl::comm_t comm_;
  std::chrono::milliseconds timeout_;
  std::uint64_t next_seq_ = 0;
  int group_depth_ = 0;
  std::vector<std::pair<stream_handle, std::string>> group_streams_;
  std::unordered_map<void*, void*> registrations_;  // base pointer -> NCCL handle

  std::mutex call_mu_;  // NCCL calls on comm_, aborted_
  bool aborted_ = false;
  mutable std::mutex state_mu_;  // failed_, pending_, spare_, stopping_
  status failed_;
  std::deque<watched> pending_;
  std::vector<event_handle> spare_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread watchdog_;
};

}  // namespace

result<nccl_id> nccl_unique_id(const nccl_options& options) {
  auto lib = nccl::load(options.library);
  if (!lib) return lib.error();
  ncclUniqueId raw{};
  if (nccl::result_t r = (*lib)->get_unique_id(&raw); r != ncclSuccess) {
    return (*lib)->error("ncclGetUniqueId", r, nullptr);
  }
  nccl_id id;
  std::copy(std::begin(raw.internal), std::end(raw.internal), id.bytes.begin());
  return id;
}

namespace {

status check_rank(const device& dev, const nccl_options& options) {
  if (options.timeout.count() <= 0 || options.bootstrap_timeout.count() <= 0) {
    return {errc::invalid_argument, "nccl communicator: the timeouts must be positive"};
  }
  if (dev.memory_is_host()) {
    return {errc::invalid_argument, "nccl communicator: " + dev.name() +
                                        " is not a cuda device (use the local communicator for "
                                        "sim devices)"};
  }
  return {};
}

}  // namespace

result<std::unique_ptr<communicator>> create_nccl_communicator(device& dev, int rank, int size,
                                                               const nccl_id& id,
                                                               const nccl_options& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return status{errc::invalid_argument, "nccl communicator: rank " + std::to_string(rank) +
                                              " is not in [0, " + std::to_string(size) + ")"};
  }
  if (auto s = check_rank(dev, options); !s) return s;
  auto lib = nccl::load(options.library);
  if (!lib) return lib.error();
  if (auto s = dev.make_current(); !s) return s;
  ncclUniqueId raw{};
  std::copy(id.bytes.begin(), id.bytes.end(), std::begin(raw.internal));
  nccl::comm_t comm = nullptr;
  if (nccl::result_t r = (*lib)->comm_init_rank(&comm, size, raw, rank); r != ncclSuccess) {
    return (*lib)->error(
        "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")", r,
        nullptr);
  }
  return std::unique_ptr<communicator>(
      std::make_unique<nccl_communicator>(dev, rank, size, **lib, comm, options.timeout));
}

result<std::vector<std::unique_ptr<communicator>>> create_nccl_communicators(
    std::span<device* const> devices, const nccl_options& options) {
  if (devices.empty()) return status{errc::invalid_argument, "nccl communicator: no devices"};
  std::unordered_set<device*> seen;
  for (device* d : devices) {
    if (d == nullptr || !seen.insert(d).second) {
      return status{errc::invalid_argument,
                    "nccl communicator: every rank needs its own device (null or repeated)"};
    }
    // Checked before any rank starts: one that fails after the others have
    // entered ncclCommInitRank would leave them waiting for it.
    if (auto s = check_rank(*d, options); !s) return s;
  }
  auto id = nccl_unique_id(options);
  if (!id) return id.error();
  const int n = static_cast<int>(devices.size());
  std::vector<result<std::unique_ptr<communicator>>> made;
  made.reserve(devices.size());
  for (int r = 0; r < n; ++r) {
    made.emplace_back(status{errc::comm_error, "nccl communicator: rank not initialised"});
  }
  {
    std::vector<std::jthread> threads;
    threads.reserve(devices.size());
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        made[static_cast<std::size_t>(r)] =
            create_nccl_communicator(*devices[static_cast<std::size_t>(r)], r, n, *id, options);
      });
    }
  }
  std::vector<std::unique_ptr<communicator>> ranks;
  ranks.reserve(made.size());
  for (auto& m : made) {
    if (!m) return m.error();
    ranks.push_back(std::move(*m));
  }
  return ranks;
}

}  // namespace strata
