// The `local` communicator: a call queues a host function on the rank's
// stream that joins the group's slot for the call's sequence number (see
// local_group.hpp); the stream waits there until every rank has arrived and
// the collective has run (on timing-only devices a timed host function:
// the stream goes on at the collective's modeled end). Calls inside a group
// are held and queued at the outermost group_end.
#include <string>
#include <unordered_set>
#include <utility>

#include "local_group.hpp"
#include "strata/communicator.hpp"

namespace strata {

namespace {

struct queued_join {
  std::shared_ptr<local_group> group;
  std::uint64_t seq;
  int rank;
  collective_call call;

  static void run(void* arg) { (void)run_timed(arg, 0); }

  static double run_timed(void* arg, double start) {
    std::unique_ptr<queued_join> self(static_cast<queued_join*>(arg));
    double ends = start;
    // A failure is the group's: every rank's async_error() reports it.
    (void)self->group->join(self->seq, self->rank, self->call, start, ends);
    return ends;
  }
};

class local_communicator final : public communicator {
 public:
  local_communicator(device& dev, int rank, std::shared_ptr<local_group> group)
      : communicator(dev, rank, group->modeled_ranks()), group_(std::move(group)) {}

 private:
  status do_collective(const collective_call& call) override {
    if (group_depth_ > 0) {
      held_.push_back(call);
      return {};
    }
    return queue(call);
  }

  status queue(const collective_call& call) {
    auto job = std::make_unique<queued_join>(queued_join{group_, next_seq_, rank(), call});
    status s = dev().timing_only()
                   ? dev().launch_timed_host_fn(call.stream, &queued_join::run_timed, job.get())
                   : dev().launch_host_fn(call.stream, &queued_join::run, job.get());
    if (!s) {
      do_call_failed(call, s);
      return s;
    }
    (void)job.release();  // the host function owns it now
    ++next_seq_;
    return {};
  }

  status do_group_start() override {
    ++group_depth_;
    return {};
  }

  status do_group_end() override {
    if (group_depth_ == 0) {
      return {errc::invalid_argument, "group_end without group_start"};
    }
    if (--group_depth_ > 0) return {};
    std::vector<collective_call> calls = std::move(held_);
    held_.clear();
    for (const collective_call& call : calls) {
      if (auto s = queue(call); !s) return s;
    }
    return {};
  }

  status do_register(void* /*ptr*/, std::size_t /*bytes*/) override {
    return {};  // the host reaches every sim device's memory: nothing to map
  }
  status do_deregister(void* /*ptr*/) override { return {}; }

  status do_async_error() const override { return group_->failed(); }

  void do_call_failed(const collective_call& call, const status& why) override {
    group_->fail({errc::comm_error, "local communicator: rank " + std::to_string(rank()) +
                                        " failed its " + collective_name(call.kind) +
                                        " call (collective #" + std::to_string(next_seq_) +
                                        "): " + why.to_string()});
  }

  std::shared_ptr<local_group> group_;
  std::uint64_t next_seq_ = 0;
  int group_depth_ = 0;
  std::vector<collective_call> held_;
};

}  // namespace

result<std::vector<std::unique_ptr<communicator>>> create_local_communicators(
    std::span<device* const> devices, const local_comm_options& options) {
  if (devices.empty()) {
    return status{errc::invalid_argument, "local communicator: no devices"};
  }
  if (options.timeout.count() <= 0) {
    return status{errc::invalid_argument, "local communicator: timeout must be positive"};
  }
  // NaN fails every comparison, so each check is written to pass only
  // for a number in range.
  if (!(options.link_gbps == 0 ||
        (options.link_gbps >= min_link_gbps && options.link_gbps <= max_link_gbps))) {
    return status{errc::invalid_argument,
                  "local communicator: link_gbps must be 0 (no modeled link) or a rate from " +
                      std::to_string(min_link_gbps) + " to " + std::to_string(max_link_gbps) +
                      " GB/s, not " + std::to_string(options.link_gbps)};
  }
  if (!(options.latency_us >= 0 && options.latency_us <= max_latency_us)) {
    return status{errc::invalid_argument, "local communicator: latency_us must be from 0 to " +
                                              std::to_string(max_latency_us) + " us, not " +
                                              std::to_string(options.latency_us)};
  }
  std::unordered_set<device*> seen;
  std::size_t timing_only = 0;
  for (device* d : devices) {
    if (d == nullptr || !seen.insert(d).second) {
      return status{errc::invalid_argument,
                    "local communicator: every rank needs its own device (null or repeated)"};
    }
    if (!d->memory_is_host() && !d->timing_only()) {
      return status{errc::not_supported, "local communicator: device " + d->name() +
                                             " has memory the host cannot reach; the local "
                                             "communicator runs on sim devices"};
    }
    timing_only += d->timing_only() ? 1 : 0;
  }
  if (timing_only != 0 && timing_only != devices.size()) {
    return status{errc::invalid_argument,
                  "local communicator: either every device is timing-only (data=none) or none"};
  }
  if (options.modeled_ranks != 0) {
    if (timing_only == 0) {
      return status{errc::invalid_argument,
                    "local communicator: modeled_ranks needs timing-only devices (data=none): "
                    "the ranks it adds have no memory to move bytes to"};
    }
    if (options.modeled_ranks < devices.size() || options.modeled_ranks > max_modeled_ranks) {
      return status{errc::invalid_argument,
                    "local communicator: modeled_ranks must be from the device count (" +
                        std::to_string(devices.size()) + ") to " +
                        std::to_string(max_modeled_ranks) + ", not " +
                        std::to_string(options.modeled_ranks)};
    }
  }
  auto pool = kernel_pool::create(1);
  if (!pool) return pool.error();
  auto group = std::make_shared<local_group>(static_cast<int>(devices.size()), options,
                                             std::move(*pool), timing_only == 0);
  std::vector<std::unique_ptr<communicator>> ranks;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    ranks.push_back(std::make_unique<local_communicator>(*devices[r], static_cast<int>(r), group));
  }
  return ranks;
}

}  // namespace strata
