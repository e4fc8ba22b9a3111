// The bucket state machine of a step. Invariants (under mu): pending[b] is
// the number of bucket b's gradients not yet marked this step; buckets
// [0, next_launch) have their reductions queued on the communication
// stream, and pending[b] == 0 for each of them; marked counts ready[].
//
// Cost: mark_ready records one event and, when it completes buckets, queues
// one stream wait per gradient of each and its collective; no device
// allocation after create (the rebuild allocates once).
#include "strata/gradient_buckets.hpp"

#include <algorithm>
#include <string>

#include "bucket_plan.hpp"

namespace strata {

struct gradient_buckets::state {
  communicator& comm;
  device& dev;
  stream_handle comm_stream;
  bucket_options opt;
  std::vector<gradient_param> params;
  std::unique_ptr<gradient_buffer> grads;
  std::vector<bucket> plan;
  std::vector<std::size_t> bucket_of;  // parameter -> bucket
  std::vector<std::size_t> pending;    // per bucket
  std::vector<bool> ready;             // per parameter, this step
  std::vector<event_handle> ready_events;
  event_handle comm_done{};
  std::size_t next_launch = 0;
  std::size_t marked = 0;
  std::vector<std::size_t> observed;  // the first synchronized step's ready order
  // The order exchange queued by the first synchronized finish: rank 0's
  // order arrives in `exchanged` through `scratch` on the comm stream.
  bool rebuild_pending = false;
  std::vector<std::uint32_t> exchanged;
  std::unique_ptr<gradient_buffer> scratch;
  status rebuild_error;
  bool no_sync = false;
  bool rebuilt = false;
  std::unique_ptr<kernel_pool> pool;
  std::unique_ptr<stream_kernels> kernels;
  std::vector<std::unique_ptr<gradient_buffer>> staging;  // copy mode: packed buckets
  std::vector<std::unique_ptr<gradient_buffer>> wire;     // a cast: the reduce_type's values
  std::vector<std::uint64_t> registrations;               // with the communicator
  counters c{};
  mutable std::mutex mu;

  state(communicator& cm, stream_handle stream, const bucket_options& o,
        std::span<const gradient_param> ps)
      : comm(cm), dev(cm.dev()), comm_stream(stream), opt(o), params(ps.begin(), ps.end()) {}

  status replan();
  status register_buffers();
  void deregister_buffers();
  status launch(std::size_t b);
  // All-reduces `count` elements of `type` at `data` in place, through the
  // wire buffer `slot` when reduce_type differs.
  status reduce(std::size_t slot, void* data, std::size_t count, dtype type);
  [[nodiscard]] dtype wire_type(dtype type) const { return opt.reduce_type.value_or(type); }
  status make_staging(std::size_t bytes, std::vector<std::unique_ptr<gradient_buffer>>& into);
  status launch_ready();
  status start_rebuild();
  status finish_rebuild();
  // Completes a queued rebuild (keeping its error for the next call).
  status settle();
  void reset_step();
};

namespace {

status bucket_error(const std::string& why) {
  return {errc::invalid_argument, "gradient buckets: " + why};
}

}  // namespace

status gradient_buckets::state::replan() {
  deregister_buffers();  // before the staging buffers they name go
  plan = plan_buckets(*grads, opt.first_bucket_bytes, opt.bucket_bytes);
  bucket_of.assign(params.size(), 0);
  std::size_t largest = 0;
  std::size_t largest_wire = 0;  // bytes of the largest cast bucket in its reduce_type
  for (std::size_t b = 0; b < plan.size(); ++b) {
    const bucket& bk = plan[b];
    for (const std::size_t p : bk.params) bucket_of[p] = b;
    largest = std::max(largest, bk.payload);
    if (wire_type(bk.type) != bk.type) {
      const std::size_t on_wire = opt.gradient_as_bucket_view ? bk.bytes : bk.payload;
      largest_wire =
          std::max(largest_wire, on_wire / dtype_size(bk.type) * dtype_size(wire_type(bk.type)));
    }
  }
  pending.assign(plan.size(), 0);
  reset_step();
  staging.clear();
  wire.clear();
  c.staging_bytes = 0;
  if (!opt.gradient_as_bucket_view) {
    if (auto s = make_staging(largest, staging); !s) return s;
  }
  if (largest_wire > 0) {
    if (auto s = make_staging(largest_wire, wire); !s) return s;
  }
  c.buckets = plan.size();
  c.gradient_bytes = grads->reserved_bytes();
  return register_buffers();
}

status gradient_buckets::state::make_staging(std::size_t bytes,
                                             std::vector<std::unique_ptr<gradient_buffer>>& into) {
  const gradient_param flat{(bytes + 1) / 2, dtype::bf16};  // `bytes` bytes
  for (std::uint64_t k = 0; k < opt.buckets_inflight; ++k) {
    auto s = gradient_buffer::create(dev, {&flat, 1});
    if (!s) return s.error();
    c.staging_bytes += (*s)->reserved_bytes();
    into.push_back(std::move(*s));
  }
  return {};
}

status gradient_buckets::state::register_buffers() {
  std::vector<const gradient_buffer*> all{grads.get()};
  for (const auto& s : staging) all.push_back(s.get());
  for (const auto& s : wire) all.push_back(s.get());
  for (const gradient_buffer* b : all) {
    auto h = comm.register_buffer(b->data(), b->bytes());
    if (!h && h.code() == errc::not_supported) return {};  // an older NCCL: unregistered
    if (!h) return h.error();
    registrations.push_back(*h);
    c.registered_bytes += b->bytes();
  }
  return {};
}

void gradient_buckets::state::deregister_buffers() {
  for (const std::uint64_t h : registrations) (void)comm.deregister_buffer(h);
  registrations.clear();
  c.registered_bytes = 0;
}

void gradient_buckets::state::reset_step() {
  for (std::size_t b = 0; b < plan.size(); ++b) pending[b] = plan[b].params.size();
  ready.assign(params.size(), false);
  next_launch = 0;
  marked = 0;
}

status gradient_buckets::state::launch(std::size_t b) {
  const bucket& bk = plan[b];
  for (const std::size_t p : bk.params) {
    if (auto s = dev.stream_wait_event(comm_stream, ready_events[p]); !s) return s;
  }
  const std::size_t size = dtype_size(bk.type);
  ++c.reductions;
  if (opt.gradient_as_bucket_view) {
    void* slice = static_cast<unsigned char*>(grads->data()) + bk.offset;
    return reduce(b, slice, bk.bytes / size, bk.type);
  }
  // Copy mode: pack, reduce, unpack, in order on the communication stream,
  // so the staging buffer is reused only after its last unpack.
  gradient_buffer& flat = *staging[b % staging.size()];
  std::vector<pack_entry> entries;
  std::size_t at = 0;
  for (const std::size_t p : bk.params) {
    entries.push_back({grads->view(p), grads->bytes_of(p), at});
    at += grads->bytes_of(p);
  }
  if (auto s = kernels->pack(comm_stream, entries.data(), entries.size(), flat.data(), at); !s) {
    return s;
  }
  c.bytes_copied += at;
  if (auto s = reduce(b, flat.data(), at / size, bk.type); !s) return s;
  return kernels->unpack(comm_stream, entries.data(), entries.size(), flat.data(), at);
}

status gradient_buckets::state::reduce(std::size_t slot, void* data, std::size_t count,
                                       dtype type) {
  const dtype on_wire = wire_type(type);
  if (on_wire == type) {
    c.bytes_reduced += count * dtype_size(type);
    return comm.all_reduce(data, data, count, type, opt.op, comm_stream);
  }
  // Cast, reduce, cast back. An average is taken on the fp32 side by the
  // scale kernel (before the cast down, or after the cast up), the sum by
  // the collective; with no fp32 side, by the collective.
  void* w = wire[slot % wire.size()]->data();
  const bool avg = opt.op == reduce_op::avg;
  const bool scale_before = avg && type == dtype::f32;
  const bool scale_after = avg && !scale_before && on_wire == dtype::f32;
  const float share = 1.0F / static_cast<float>(comm.size());
  if (scale_before) {
    if (auto s = kernels->scale(comm_stream, static_cast<float*>(data), share, count); !s) return s;
  }
  if (auto s = kernels->cast_copy(comm_stream, w, on_wire, data, type, count); !s) return s;
  if (scale_after) {
    if (auto s = kernels->scale(comm_stream, static_cast<float*>(w), share, count); !s) return s;
  }
  const reduce_op op = scale_before || scale_after ? reduce_op::sum : opt.op;
  c.bytes_cast += count * (dtype_size(on_wire) + dtype_size(type));
  c.bytes_reduced += count * dtype_size(on_wire);
  if (auto s = comm.all_reduce(w, w, count, on_wire, op, comm_stream); !s) return s;
  return kernels->cast_copy(comm_stream, data, type, w, on_wire, count);
}

status gradient_buckets::state::launch_ready() {
  while (next_launch < plan.size() && pending[next_launch] == 0) {
    if (auto s = launch(next_launch); !s) return s;
    ++next_launch;
  }
  return {};
}

// Every rank takes rank 0's ready order (broadcast through a small device
// buffer), lays the gradients out in it and copies them over. Queued at the
// first synchronized finish; finished at the next call, once every rank has
// joined the broadcast.
status gradient_buckets::state::start_rebuild() {
  const std::size_t n = params.size();
  exchanged.resize(n);
  for (std::size_t i = 0; i < n; ++i) exchanged[i] = static_cast<std::uint32_t>(observed[i]);
  const gradient_param words{n, dtype::f32};  // 32-bit words: a broadcast moves bits
  auto buf = gradient_buffer::create(dev, {&words, 1});
  if (!buf) return buf.error();
  scratch = std::move(*buf);
  // A failure after work was queued: the scratch buffer is freed only once
  // that work is done.
  const auto abandon = [&](status why) {
    (void)dev.synchronize_stream(comm_stream);
    scratch.reset();
    return why;
  };
  void* d = scratch->data();
  const std::size_t bytes = n * sizeof(std::uint32_t);
  if (auto s =
          dev.copy_async(d, exchanged.data(), bytes, copy_direction::host_to_device, comm_stream);
      !s) {
    return abandon(std::move(s));
  }
  if (auto s = comm.broadcast(d, d, n, dtype::f32, 0, comm_stream); !s) {
    return abandon(std::move(s));
  }
  if (auto s =
          dev.copy_async(exchanged.data(), d, bytes, copy_direction::device_to_host, comm_stream);
      !s) {
    return abandon(std::move(s));
  }
  rebuild_pending = true;
  return {};
}

status gradient_buckets::state::finish_rebuild() {
  rebuild_pending = false;
  if (auto s = dev.synchronize_stream(comm_stream); !s) return s;
  scratch.reset();
  if (auto s = comm.async_error(); !s) return s;
  const std::vector<std::size_t> layout(exchanged.begin(), exchanged.end());
  auto next = gradient_buffer::create(dev, params, layout);
  if (!next) {
    return status{next.code(), "gradient buckets: rank 0's ready order cannot be used: " +
                                   next.error().message()};
  }
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (auto s = dev.copy_async((*next)->view(p), grads->view(p), grads->bytes_of(p),
                                copy_direction::device_to_device, comm_stream);
        !s) {
      (void)dev.synchronize_stream(comm_stream);  // the copies queued use `next`
      return s;
    }
  }
  if (auto s = dev.synchronize_stream(comm_stream); !s) return s;
  deregister_buffers();
  grads = std::move(*next);
  ++c.rebuilds;
  return replan();
}

status gradient_buckets::state::settle() {
  if (rebuild_pending) rebuild_error = finish_rebuild();
  if (rebuild_error.ok()) return {};
  status e{rebuild_error.code(), rebuild_error.message()};
  rebuild_error = {};
  return e;
}

result<std::unique_ptr<gradient_buckets>> gradient_buckets::create(
    communicator& comm, std::span<const gradient_param> params, stream_handle comm_stream,
    const bucket_options& options) {
  if (auto s = check_bucket_options(options); !s) return s;
  if (options.reduce_type && *options.reduce_type != dtype::f32 &&
      *options.reduce_type != dtype::bf16 && *options.reduce_type != dtype::f16) {
    return bucket_error("reduce_type is not a dtype");
  }
  if (params.size() > UINT32_MAX) return bucket_error("more than 2^32 parameters");
  // A stream the device does not know would fail only at the first
  // mark_ready, leaving a step that can never finish.
  if (auto known = comm.dev().wrap_stream(comm_stream.native); !known) {
    return bucket_error("comm_stream is not a stream of the communicator's device: " +
                        known.error().message());
  }
  auto s = std::make_unique<state>(comm, comm_stream, options, params);
  auto grads = gradient_buffer::create(s->dev, params);
  if (!grads) return grads.error();
  s->grads = std::move(*grads);
  auto pool = kernel_pool::create(1);
  if (!pool) return pool.error();
  s->pool = std::move(*pool);
  s->kernels = std::make_unique<stream_kernels>(s->dev, *s->pool);
  std::unique_ptr<gradient_buckets> g(new gradient_buckets(std::move(s)));
  state& st = *g->s_;
  auto done = st.dev.create_event();
  if (!done) return done.error();
  st.comm_done = *done;
  for (std::size_t p = 0; p < params.size(); ++p) {
    auto e = st.dev.create_event();
    if (!e) return e.error();
    st.ready_events.push_back(*e);
  }
  if (auto r = st.replan(); !r) return r;
  return g;
}

gradient_buckets::gradient_buckets(std::unique_ptr<state> s) : s_(std::move(s)) {}

gradient_buckets::~gradient_buckets() {
  (void)s_->dev.synchronize_stream(s_->comm_stream);
  s_->deregister_buffers();
  for (const event_handle e : s_->ready_events) (void)s_->dev.destroy_event(e);
  if (s_->comm_done.native != nullptr) (void)s_->dev.destroy_event(s_->comm_done);
}

void* gradient_buckets::grad(std::size_t p) const {
  std::lock_guard lock(s_->mu);
  if (s_->rebuild_pending) s_->rebuild_error = s_->finish_rebuild();
  return s_->grads->view(p);
}

const gradient_buffer& gradient_buckets::buffer() const {
  std::lock_guard lock(s_->mu);
  if (s_->rebuild_pending) s_->rebuild_error = s_->finish_rebuild();
  return *s_->grads;
}

status gradient_buckets::zero(stream_handle stream) {
  std::lock_guard lock(s_->mu);
  if (auto s = s_->settle(); !s) return s;
  if (auto s = s_->dev.stream_wait_event(stream, s_->comm_done); !s) return s;
  return s_->grads->zero(stream);
}

status gradient_buckets::mark_ready(std::size_t p, stream_handle producer) {
  std::lock_guard lock(s_->mu);
  state& st = *s_;
  if (auto s = st.settle(); !s) return s;
  if (p >= st.params.size()) {
    return bucket_error("parameter " + std::to_string(p) + " is not one of the " +
                        std::to_string(st.params.size()));
  }
  if (st.ready[p])
    return bucket_error("parameter " + std::to_string(p) + " marked twice in a step");
  if (!st.no_sync) {
    if (auto s = st.dev.record_event(st.ready_events[p], producer); !s) return s;
  }
  st.ready[p] = true;
  ++st.marked;
  if (st.no_sync) return {};
  if (st.opt.rebuild && st.c.rebuilds == 0) st.observed.push_back(p);
  --st.pending[st.bucket_of[p]];
  return st.launch_ready();
}

status gradient_buckets::finish(stream_handle consumer) {
  std::lock_guard lock(s_->mu);
  state& st = *s_;
  if (auto s = st.settle(); !s) return s;
  if (st.marked < st.params.size()) {
    std::string missing;
    std::size_t listed = 0;
    for (std::size_t p = 0; p < st.params.size() && listed < 10; ++p) {
      if (st.ready[p]) continue;
      missing += (listed++ == 0 ? "" : ", ") + std::to_string(p);
    }
    return bucket_error(std::to_string(st.params.size() - st.marked) +
                        " parameter(s) never marked ready this step: " + missing +
                        (st.params.size() - st.marked > listed ? ", ..." : ""));
  }
  ++st.c.steps;
  if (st.no_sync) {
    st.reset_step();
    return {};
  }
  if (auto s = st.dev.record_event(st.comm_done, st.comm_stream); !s) return s;
  if (auto s = st.dev.stream_wait_event(consumer, st.comm_done); !s) return s;
  status queued;
  if (st.opt.rebuild && st.c.rebuilds == 0) {
    queued = st.start_rebuild();
    st.observed.clear();
  }
  st.reset_step();
  return queued;
}

void gradient_buckets::no_sync(bool on) {
  std::lock_guard lock(s_->mu);
  s_->no_sync = on;
}

gradient_buckets::counters gradient_buckets::stats() const {
  std::lock_guard lock(s_->mu);
  return s_->c;
}

std::vector<std::vector<std::size_t>> gradient_buckets::buckets() const {
  std::lock_guard lock(s_->mu);
  if (s_->rebuild_pending) s_->rebuild_error = s_->finish_rebuild();
  std::vector<std::vector<std::size_t>> out;
  for (const bucket& b : s_->plan) out.push_back(b.params);
  return out;
}

}  // namespace strata
