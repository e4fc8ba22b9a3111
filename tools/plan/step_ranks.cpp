#include "plan/step_ranks.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "plan/memory_traffic.hpp"
#include "plan/sharded_params.hpp"
#include "plan/step_run.hpp"
#include "strata/communicator.hpp"
#include "strata/gradient_buckets.hpp"
#include "strata/strata.hpp"

namespace strata::plan {

namespace {

// A module the step fetches, computes and reduces as one: a transformer
// layer, or the embeddings with the head (`outer_params`).
struct unit {
  double forward_flops = 0;  // one micro-batch
  double forward_bytes = 0;  // one micro-batch: memory-bound kernels' traffic (memory_traffic)
  std::size_t shard = 0;     // ZeRO-3: elements of this rank's parameter shard
  std::size_t grads = 0;     // trainable elements (their gradients)
  bool layer = true;         // false: embeddings and head (never recomputed)
  std::size_t index = 0;     // in forward order
};

// What every rank runs: the same on all of them.
struct step_shape {
  std::vector<unit> forward;  // layers in order, then the head
  double backward_factor = 2;
  std::size_t ranks = 1;  // the group a parameter is sharded or reduced over
  dtype type = dtype::bf16;
  double element = 2;            // bytes of a parameter or gradient element
  double optimizer_seconds = 0;  // host work of the offloaded optimizer step
  double optimizer_bytes = 0;    // the optimizer step on the GPU: its kernels' traffic
  double nvme_gbps = 0;          // one GPU's share of the node's NVMe (0: instant)
};

std::size_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return static_cast<std::size_t>((a + b - 1) / b);
}

step_shape shape_of(const plan_setup& s, timed_parts parts) {
  const model_shape& m = s.model;
  step_shape z;
  z.ranks = s.zero == 3 ? shard_ranks(s) : s.gpus;
  z.type = weight_bytes(s.dtype) == 4 ? dtype::f32 : dtype::bf16;
  z.element = static_cast<double>(weight_bytes(s.dtype));
  z.backward_factor = s.lora_rank > 0 ? 1.0 : 2.0;
  const auto tokens = static_cast<double>(s.micro_batch * s.seq);
  const double attention = 4.0 * static_cast<double>(s.micro_batch) * static_cast<double>(s.seq) *
                           static_cast<double>(s.seq) * static_cast<double>(m.hidden);
  const std::uint64_t trainable = trainable_params(s);
  const std::uint64_t layer_grads = s.lora_rank > 0 ? trainable / m.layers : layer_params(m);
  const std::uint64_t outer_grads = s.lora_rank > 0 ? 0 : outer_params(m);
  const auto shard = [&](std::uint64_t params) {
    return s.zero == 3 ? ceil_div(params, z.ranks) : std::size_t{0};
  };
  const memory_traffic traffic = memory_traffic_of(s);
  for (std::uint64_t l = 0; l < m.layers; ++l) {
    z.forward.push_back({2.0 * static_cast<double>(layer_params(m)) * tokens + attention,
                         traffic.layer, shard(layer_params(m)), layer_grads, true});
  }
  z.forward.push_back({2.0 * static_cast<double>(outer_params(m)) * tokens, traffic.head,
                       shard(outer_params(m)), outer_grads, false});
  if (s.optimizer == offload_to::none) {
    z.optimizer_bytes = traffic.optimizer_per_param * static_cast<double>(trainable) /
                        static_cast<double>(s.zero > 0 ? z.ranks : 1);
  }
  for (std::size_t i = 0; i < z.forward.size(); ++i) z.forward[i].index = i;
  if (!parts.transfers) return z;
  const std::uint64_t gpus_per_node = s.gpus / s.nodes;  // check_setup: nodes divide gpus
  const auto per_node = static_cast<double>(gpus_per_node);
  z.nvme_gbps = s.rates.nvme_gbps / per_node;
  if (s.optimizer != offload_to::none) {
    const double mine = static_cast<double>(trainable) / static_cast<double>(z.ranks);
    z.optimizer_seconds = mine * per_node / (s.rates.host_adam_gparams * 1e9);
    if (s.optimizer == offload_to::nvme) {  // fp32 master, m and v read and written
      z.optimizer_seconds += 2 * 12 * mine * per_node / (s.rates.nvme_gbps * 1e9);
    }
  }
  return z;
}

double take_host_time(void* arg, double start) {
  return start + *static_cast<const double*>(arg);
}

// ZeRO-3's parameters go through the residency manager and the prefetcher
// (sharded_params).
bool through_prefetcher(const plan_setup& s) {
  return s.zero == 3;
}

// Each unit's shard, in bytes.
std::vector<std::size_t> shard_bytes(const step_shape& z) {
  std::vector<std::size_t> bytes;
  bytes.reserve(z.forward.size());
  for (const unit& u : z.forward) bytes.push_back(u.shard * static_cast<std::size_t>(z.element));
  return bytes;
}

// One rank's step: queues everything, then waits for its streams.
class rank_step {
 public:
  rank_step(const plan_setup& s, const step_shape& z, allocator& alloc, void* buffer,
            communicator* group, communicator* replicas)
      : s_(s), z_(z), dev_(alloc.dev()), buffer_(buffer), group_(group), replicas_(replicas) {
    for (stream_handle* h : {&compute_, &comm_, &copy_}) *h = make_stream();
    for (event_handle* e : {&done_, &reduced_, &copied_}) *e = make_event();
    if (s.zero == 0 && group != nullptr) make_buckets();
    if (through_prefetcher(s)) {
      params_ = std::make_unique<sharded_params>(alloc, group, comm_, shard_bytes(z), z.type,
                                                 s.params, z.nvme_gbps);
    }
  }
  rank_step(const rank_step&) = delete;
  rank_step& operator=(const rank_step&) = delete;
  rank_step(rank_step&&) = delete;
  rank_step& operator=(rank_step&&) = delete;
  ~rank_step() {
    buckets_.reset();  // waits for its reductions
    params_.reset();
    (void)dev_.synchronize();
    for (stream_handle h : {compute_, comm_, copy_}) (void)dev_.destroy_stream(h);
    for (event_handle e : {done_, reduced_, copied_}) (void)dev_.destroy_event(e);
  }

  // Runs `warmup` steps, then one more, and returns that one's modeled
  // seconds: from the end of the step before it (every stream done) to its
  // own end. Steps are separated by a device synchronize (as a loop that
  // reads the loss), and the prefetcher's first fetches of a step are
  // issued before it.
  step_run run(int warmup) {
    double start = 0;
    prefetcher::counters before{};
    for (int k = 0; k <= warmup; ++k) {
      if (k == warmup) {
        start = clock();
        if (params_) before = params_->stats();
      }
      step();
    }
    step_run r{clock() - start, {}, {}};
    if (params_) {
      const prefetcher::counters after = params_->stats();
      r.params = {after.gathers - before.gathers,
                  after.gathers_ahead - before.gathers_ahead,
                  after.gathers_reused - before.gathers_reused,
                  after.step_bytes_from_host,
                  after.step_bytes_from_nvme,
                  after.step_bytes_to_nvme,
                  after.late_fills - before.late_fills};
    }
    return r;
  }

 private:
  double clock() { return value_or_throw(dev_.modeled_clock()); }

  void step() {
    std::vector<unit> backward(z_.forward.rbegin(), z_.forward.rend());
    if (params_) params_->begin_step();
    if (buckets_) throw_if_error(buckets_->zero(compute_));
    for (std::uint64_t micro = 0; micro < s_.grad_accum; ++micro) {
      const bool last = micro + 1 == s_.grad_accum;
      if (buckets_) buckets_->no_sync(!last);  // DDP accumulates, reduces at the last
      pass(z_.forward, false, last);
      pass(backward, true, last);
      if (buckets_) throw_if_error(buckets_->finish(compute_));
    }
    if (replicas_ != nullptr) {  // hybrid shard: the shards' replicas average across nodes
      for (const unit& u : z_.forward) {
        const std::size_t shard = ceil_div(u.grads, z_.ranks);
        if (shard > 0) {
          throw_if_error(
              replicas_->all_reduce(buffer_, buffer_, shard, z_.type, reduce_op::avg, comm_));
        }
      }
    }
    if (params_) params_->end_step();  // the shards are updated between steps
    if (s_.optimizer != offload_to::none) optimizer_on_host();
    if (z_.optimizer_bytes > 0) optimizer_on_gpu();
    if (s_.zero == 1 || s_.zero == 2) {  // the updated parameters, to every rank
      for (const unit& u : z_.forward) gather(ceil_div(u.grads, z_.ranks));
    }
    throw_if_error(dev_.synchronize());
    // The NVMe reads the step issued (ahead, for the next one) end on the
    // disk's clock: the step is not over before they are, or a disk slower
    // than the step would show no time in a single measured step.
    if (params_) params_->wait_for_reads();
  }

  stream_handle make_stream() { return value_or_throw(dev_.create_stream()); }
  event_handle make_event() { return value_or_throw(dev_.create_event()); }
  void wait(stream_handle stream, event_handle event) {
    throw_if_error(dev_.stream_wait_event(stream, event));
  }
  // DDP: Strata's gradient buckets over the units' gradients (default
  // options: a 1 MiB first bucket, 25 MiB after, reduced in place).
  void make_buckets() {
    std::vector<gradient_param> params;
    for (const unit& u : z_.forward) {
      bucket_of_.push_back(u.grads > 0 ? params.size() : no_bucket);
      if (u.grads > 0) params.push_back({u.grads, z_.type});
    }
    if (params.empty()) return;
    buckets_ = value_or_throw(gradient_buckets::create(*group_, params, comm_));
  }
  // The matmuls at the matmul rate, then the memory-bound kernels at the
  // memory rate (one after the other on the stream: their times add).
  void kernel(double flops, double bytes) {
    throw_if_error(dev_.queue_modeled_kernel(compute_, flops, 0));
    if (bytes > 0) throw_if_error(dev_.queue_modeled_kernel(compute_, 0, bytes));
  }
  void host_work(const double* seconds) {
    throw_if_error(dev_.launch_timed_host_fn(copy_, &take_host_time, const_cast<double*>(seconds)));
  }
  // A copy of `bytes` between this rank's buffer and the host (a timing-only
  // device reads and writes no host byte: `&host_` stands for the host side).
  void copy(double bytes, copy_direction direction) {
    const auto n = static_cast<std::size_t>(bytes);
    if (direction == copy_direction::host_to_device) {
      throw_if_error(dev_.copy_async(buffer_, &host_, n, direction, copy_));
    } else {
      throw_if_error(dev_.copy_async(&host_, buffer_, n, direction, copy_));
    }
  }
  void gather(std::size_t shard) {
    if (group_ != nullptr && shard > 0) {
      throw_if_error(group_->all_gather(buffer_, buffer_, shard, z_.type, comm_));
    }
  }

  // One pass over `units`: each unit's parameters (ZeRO-3: acquired
  // through the prefetcher, which has gathered them ahead), its kernels,
  // and in backward its gradients reduced.
  void pass(const std::vector<unit>& units, bool backward, bool last_micro) {
    for (const unit& u : units) {
      if (params_) params_->acquire(u.index, compute_);
      if (backward && s_.checkpointing && u.layer) {
        kernel(u.forward_flops, u.forward_bytes);  // recompute
      }
      kernel(backward ? z_.backward_factor * u.forward_flops : u.forward_flops,
             backward ? backward_traffic * u.forward_bytes : u.forward_bytes);
      throw_if_error(dev_.record_event(done_, compute_));
      if (params_) params_->release(u.index, compute_);
      if (backward) reduce(u, last_micro);
    }
  }

  // The unit's gradients: all-reduced (DDP) or reduce-scattered (ZeRO) once
  // they are computed; ZeRO-3 every micro-batch, the others at the last.
  // With the optimizer on the host, this rank's part then goes down.
  void reduce(const unit& u, bool last_micro) {
    if (buckets_ && u.grads > 0) {
      throw_if_error(buckets_->mark_ready(bucket_of_[u.index], compute_));
      return;
    }
    if (u.grads == 0 || (s_.zero < 3 && !last_micro)) return;
    if (group_ != nullptr) {
      wait(comm_, done_);
      throw_if_error(group_->reduce_scatter(buffer_, buffer_, ceil_div(u.grads, z_.ranks), z_.type,
                                            reduce_op::avg, comm_));
    }
    if (s_.optimizer == offload_to::none || !last_micro) return;
    throw_if_error(dev_.record_event(reduced_, group_ != nullptr ? comm_ : compute_));
    wait(copy_, reduced_);
    copy(static_cast<double>(ceil_div(u.grads, z_.ranks)) * z_.element,
         copy_direction::device_to_host);
  }

  // The optimizer step on the GPU once the gradients are reduced: Adam's
  // kernels are memory-bound. The parameters' gathers wait for it.
  void optimizer_on_gpu() {
    throw_if_error(dev_.record_event(reduced_, comm_));
    wait(compute_, reduced_);
    kernel(0, z_.optimizer_bytes);
    throw_if_error(dev_.record_event(done_, compute_));
    wait(comm_, done_);
  }

  // CPU Adam over this rank's part (and the node's NVMe traffic), then the
  // updated parameters back up; the communication stream waits for them.
  // ZeRO-3 without LoRA updates whole shards: through the residency
  // manager (acquired for writing, filled first if spilled, then dirty).
  void optimizer_on_host() {
    if (z_.optimizer_seconds > 0) host_work(&z_.optimizer_seconds);
    const bool shards = params_ && s_.lora_rank == 0;
    for (const unit& u : z_.forward) {
      if (shards) {
        params_->update(u.index, copy_, &host_);
        continue;
      }
      copy(static_cast<double>(ceil_div(u.grads, z_.ranks)) * z_.element,
           copy_direction::host_to_device);
    }
    throw_if_error(dev_.record_event(copied_, copy_));
    wait(comm_, copied_);
  }

  const plan_setup& s_;
  const step_shape& z_;
  device& dev_;
  void* buffer_;
  communicator* group_;
  communicator* replicas_;
  stream_handle compute_{}, comm_{}, copy_{};
  event_handle done_{}, reduced_{}, copied_{};
  static constexpr std::size_t no_bucket = ~std::size_t{0};
  std::unique_ptr<gradient_buckets> buckets_;
  std::unique_ptr<sharded_params> params_;  // ZeRO-3
  std::vector<std::size_t> bucket_of_;      // unit index -> its gradient's index
  unsigned char host_ = 0;
};

// DDP's gradient buffer: every unit's gradients, each 256-byte aligned.
std::uint64_t gradient_bytes(const plan_setup& s, const step_shape& z) {
  if (s.zero != 0) return 0;
  std::uint64_t bytes = 0;
  for (const unit& u : z.forward) bytes += u.grads * static_cast<std::uint64_t>(z.element) + 256;
  return bytes;
}

// The bytes one rank's buffer needs: the largest gathered unit, gradient
// or transfer.
std::uint64_t buffer_bytes(const step_shape& z) {
  std::uint64_t elements = 1;
  for (const unit& u : z.forward) {
    elements = std::max<std::uint64_t>({elements, u.shard * z.ranks, u.grads});
  }
  return elements * static_cast<std::uint64_t>(z.element);
}

// Steps before the one measured: the first records the prefetcher's order
// and the gradient buckets' ready order, the second follows the order and
// lays the buckets out anew; from the third every step is the same.
constexpr int warmup_steps = 2;

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t to) {
  return (bytes + to - 1) / to * to;
}

// ZeRO-3's parameters through sharded_params: the room the rest of the
// step leaves them (`room`), or, when that is less, what they need: the
// shards pinned on the device (offloaded: two units' shards, the one being
// gathered and the next, filled ahead) and two units' full buffers.
std::uint64_t parameter_bytes(const plan_setup& s, const step_shape& z, std::uint64_t room,
                              std::uint64_t granularity) {
  if (!through_prefetcher(s)) return 0;
  std::uint64_t shards = 0;
  std::uint64_t largest_shard = 0;
  std::uint64_t largest_full = 0;
  for (const unit& u : z.forward) {
    const auto bytes = static_cast<std::uint64_t>(static_cast<double>(u.shard) * z.element);
    shards += round_up(bytes, granularity);
    largest_shard = std::max(largest_shard, round_up(bytes, granularity));
    largest_full = std::max(largest_full, round_up(bytes * z.ranks, granularity));
  }
  const std::uint64_t pinned = s.params == offload_to::none ? shards : 2 * largest_shard;
  return std::max(pinned + 2 * largest_full + granularity, room / granularity * granularity);
}

}  // namespace

result<step_run> run_step_ranks(const plan_setup& s, timed_parts parts,
                                std::uint64_t parameter_room, std::size_t simulated) {
  const step_shape z = shape_of(s, parts);
  const std::uint64_t granularity = plan_page_bytes(s.gpu_memory);
  const std::uint64_t buffer = round_up(buffer_bytes(z), granularity);
  const hardware_rates& r = s.rates;
  const double rate = r.tflops / (s.dtype == precision::fp32 ? 8.0 : 1.0);
  const double pcie = parts.transfers ? r.pcie_gbps : 0;
  allocator_options o;
  const std::uint64_t gradients = round_up(gradient_bytes(s, z), granularity);
  const std::uint64_t usable = s.gpu_memory - std::min(s.gpu_memory, s.context_memory);
  const std::uint64_t params = parameter_bytes(s, z, std::min(parameter_room, usable), granularity);
  // DDP's gradient buffer twice: the buckets lay it out anew in the
  // observed ready order once, at the second step, and copy it over.
  o.device = "sim:capacity=" + format_byte_option(buffer + 2 * gradients + params + granularity) +
             ",granularity=" + format_byte_option(granularity) +
             ",data=none,tflops=" + std::to_string(parts.compute ? rate : 0) +
             ",d2d_gbps=" + std::to_string(parts.compute ? r.hbm_gbps : 0) +
             ",h2d_gbps=" + std::to_string(pcie) + ",d2h_gbps=" + std::to_string(pcie) +
             (r.driver_costs ? "" : ",driver_costs=none");
  o.log_ooms = false;
  // Least waiting: a request grows the device's memory while there is
  // room, and waits for pending frees only when the device is full (the
  // setting the plan prints), so the room the step leaves bounds how far
  // gathers run ahead of the compute.
  o.wait_before_grow = false;
  // The job's ranks are alike: past `simulated`, a few stand for all.
  // The groups they belong to are modeled at their full size
  // (local_comm_options::modeled_ranks), so each collective takes the
  // time of the whole job's ring.
  const bool hybrid = s.zero == 3 && s.hybrid_shard && s.nodes > 1;
  const std::size_t group = z.ranks;  // ranks per shard (or gradient) group
  const auto all = static_cast<std::size_t>(s.gpus);
  const std::size_t most = std::max<std::size_t>(simulated, 1);
  const std::size_t gpus = all <= most ? all : std::min(std::max<std::size_t>(group, 1), most);
  std::vector<std::unique_ptr<allocator>> allocs;
  std::vector<void*> buffers;
  try {
    for (std::size_t g = 0; g < gpus; ++g) {
      allocs.push_back(std::make_unique<allocator>(o));
      buffers.push_back(allocs.back()->malloc(buffer));
    }
  } catch (const error& e) {
    return e.to_status();
  }

  // The groups: every GPU, or (hybrid shard) each node's GPUs, whose
  // replicas across nodes form groups of their own.
  const auto link = [&](bool across_nodes, std::size_t modeled) {
    local_comm_options c;
    c.timeout = std::chrono::seconds(30);
    c.link_gbps = parts.collectives ? (across_nodes ? r.network_gbps : r.nvlink_gbps) : 0;
    c.modeled_ranks = modeled;
    return c;
  };
  std::vector<std::unique_ptr<communicator>> groups(gpus);
  std::vector<std::unique_ptr<communicator>> replicas(gpus);
  const auto make = [&](const std::vector<std::size_t>& members, bool across, std::size_t modeled,
                        std::vector<std::unique_ptr<communicator>>& into) -> status {
    std::vector<device*> devices;
    devices.reserve(members.size());
    for (std::size_t g : members) devices.push_back(&allocs[g]->dev());
    auto comms =
        create_local_communicators(devices, link(across, modeled > members.size() ? modeled : 0));
    if (!comms) return comms.error();
    for (std::size_t i = 0; i < members.size(); ++i) into[members[i]] = std::move((*comms)[i]);
    return {};
  };
  if (group > 1) {
    for (std::size_t first = 0; first < gpus; first += group) {
      std::vector<std::size_t> members;
      for (std::size_t g = first; g < std::min(first + group, gpus); ++g) members.push_back(g);
      if (auto st = make(members, s.nodes > 1 && !hybrid, group, groups); !st) return st;
    }
  }
  if (hybrid) {
    const auto nodes = static_cast<std::size_t>(s.nodes);
    for (std::size_t i = 0; i < std::min(group, gpus); ++i) {
      std::vector<std::size_t> members;
      for (std::size_t g = i; g < gpus; g += group) members.push_back(g);
      if (auto st = make(members, true, nodes, replicas); !st) return st;
    }
  }

  std::vector<step_run> ends(gpus);
  std::vector<status> failures(gpus);
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < gpus; ++g) {
    threads.emplace_back([&, g] {
      try {
        rank_step step(s, z, *allocs[g], buffers[g], groups[g].get(), replicas[g].get());
        ends[g] = step.run(warmup_steps);
      } catch (const error& e) {
        failures[g] = e.to_status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const status& f : failures) {
    if (!f) return f;
  }
  groups.clear();
  replicas.clear();
  for (std::size_t g = 0; g < gpus; ++g) allocs[g]->free(buffers[g]);
  step_run slowest = ends[0];
  for (const step_run& e : ends) slowest.seconds = std::max(slowest.seconds, e.seconds);
  if (through_prefetcher(s)) {
    const offload_settings p = plan_offload_options(shard_bytes(z), z.ranks, s.params, 0);
    slowest.conf =
        "wait_before_grow:false,prefetch_bytes:" + format_byte_option(p.prefetch.prefetch_bytes) +
        ",device_lookahead:" + format_byte_option(p.prefetch.device_lookahead);
    if (s.params == offload_to::nvme) {
      slowest.conf += ",host_capacity:" + format_byte_option(p.tiers.host_capacity);
    }
  }
  return slowest;
}

}  // namespace strata::plan
