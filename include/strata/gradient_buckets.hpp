// Bucketed gradient reduction (docs/gradients.md): the gradients of a
// model's parameters live in one `gradient_buffer`; consecutive gradients of
// one dtype form buckets (the first up to `first_bucket_bytes`, the others
// up to `bucket_bytes`; a larger gradient is a bucket alone); as backward
// marks gradients ready, each complete bucket is all-reduced on the
// communication stream, overlapping the rest of backward.
//
// A step:
//   zero(compute)                  once per optimizer step (stream-ordered
//                                  after the last step's reductions)
//   ... backward writes grad(p) ..., then for each parameter:
//   mark_ready(p, producer)        the stream that wrote grad(p); an event
//                                  is recorded there and the bucket's
//                                  reduction waits for it, whatever stream
//                                  it was
//   finish(consumer)               every parameter marked; `consumer` waits
//                                  for the reductions (then the optimizer
//                                  reads the gradients)
// Buckets are reduced in index order on every rank (a bucket completed early
// waits for the ones before it), so all ranks issue the same collectives in
// the same order whatever order their gradients became ready in.
//
// After the first step the buckets are rebuilt from the order the gradients
// became ready in (rank 0's order, broadcast, so every rank builds the same
// layout); gradients keep their values across the rebuild, their views
// (`grad(p)`) move. With `no_sync(true)` steps accumulate gradients without
// reducing (micro-steps of gradient accumulation): mark_ready and finish
// only check.
//
// Two modes: gradient_as_bucket_view (default): the buckets are slices of
// the gradient buffer, reduced in place, no copy. Otherwise (DDP's default)
// each bucket is packed into one of `buckets_inflight` staging buffers,
// reduced there and unpacked (the kernels' pack/unpack), all in order on the
// communication stream, so a staging buffer is reused only after the
// reduction that used it has been unpacked.
//
// Reduced in another dtype (`reduce_type`, e.g. fp32 gradients reduced in
// bf16: half the bytes on the wire): the bucket is cast into a staging
// buffer of that dtype, all-reduced there and cast back (the kernels'
// cast), in order on the communication stream. With `op` avg and an fp32
// side, the average is the kernels' scale by 1/n on the fp32 values before
// the sum (DDP's pre-division), not the collective's.
//
// Errors: invalid_argument for an unknown parameter, a parameter marked
// twice in a step, finish with parameters never marked (listed; the step
// stays open); the communicator's and the device's errors as they come.
// Thread safety: every member may be called from any thread; calls are
// serialized by an internal mutex (autograd hooks may come from several).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "strata/bucket_options.hpp"
#include "strata/communicator.hpp"
#include "strata/counter_list.hpp"
#include "strata/gradient_buffer.hpp"
#include "strata/strata.hpp"

namespace strata {

class STRATA_API gradient_buckets {
 public:
  /// Buckets over the gradients of `params` on `comm`'s device, reduced on
  /// `comm_stream` (a stream of that device). Every rank must create its
  /// buckets with the same parameters and options. The gradient buffer and
  /// the staging buffers are registered with `comm` (`register_buffer`,
  /// ncclCommRegister on `nccl`; skipped when it answers not_supported) and
  /// deregistered before they are freed. Errors: invalid_argument (the
  /// gradient buffer's, options outside their ranges
  /// (check_bucket_options), a reduce_type that is not a dtype, a comm_stream
  /// the device does not know: on sim, one it did not create),
  /// out_of_memory, the communicator's registration error.
  static result<std::unique_ptr<gradient_buckets>> create(communicator& comm,
                                                          std::span<const gradient_param> params,
                                                          stream_handle comm_stream,
                                                          const bucket_options& options = {});
  gradient_buckets(const gradient_buckets&) = delete;
  gradient_buckets& operator=(const gradient_buckets&) = delete;
  gradient_buckets(gradient_buckets&&) = delete;
  gradient_buckets& operator=(gradient_buckets&&) = delete;
  /// Waits for the communication stream, then frees the buffers.
  ~gradient_buckets();

  /// Parameter `p`'s gradient (valid until the next rebuild); nullptr for
  /// an unknown `p`.
  [[nodiscard]] void* grad(std::size_t p) const;
  /// The gradient buffer (its layout changes at a rebuild).
  [[nodiscard]] const gradient_buffer& buffer() const;

  /// Zeroes every gradient in `stream` order, after the reductions already
  /// queued.
  status zero(stream_handle stream);
  /// Parameter `p`'s gradient is complete once `producer` reaches this
  /// point.
  status mark_ready(std::size_t p, stream_handle producer);
  /// Ends the step: every bucket's reduction is queued; `consumer` waits
  /// for them. The first synchronized finish also queues the exchange of
  /// rank 0's ready order; the next call on this object (any member but
  /// stats and no_sync) completes the rebuild: it waits once for the
  /// communication stream, so every rank must have called finish by then
  /// (with one thread driving every rank: finish all ranks first).
  status finish(stream_handle consumer);
  /// Gradient accumulation: while on, steps reduce nothing.
  void no_sync(bool on);

  /// Counters since creation (counter_list.hpp).
#define STRATA_GRADIENT_BUCKET_COUNTERS(X)                              \
  X(steps, "finished steps, synchronized or not")                       \
  X(reductions, "bucket all-reduces queued")                            \
  X(bytes_reduced, "their bytes")                                       \
  X(bytes_copied, "packed into staging (copy mode)")                    \
  X(bytes_cast, "written by reduce_type's casts, there and back")       \
  X(rebuilds, "0 or 1")                                                 \
  X(buckets, "buckets now")                                             \
  X(staging_bytes, "device bytes of the staging buffers")               \
  X(gradient_bytes, "device bytes of the gradient buffer")              \
  X(registered_bytes,                                                   \
    "bytes registered with the communicator (ncclCommRegister): the "   \
    "gradient buffer and the staging buffers; 0 when the communicator " \
    "cannot register (NCCL older than 2.19)")
  struct counters {
    STRATA_GRADIENT_BUCKET_COUNTERS(STRATA_COUNTER_MEMBER)
    /// The counters by name (strata_gradient_buckets_stats_json).
    [[nodiscard]] stat_map to_map() const {
      return {STRATA_GRADIENT_BUCKET_COUNTERS(STRATA_COUNTER_ENTRY)};
    }
  };
  [[nodiscard]] counters stats() const;
  /// The buckets now: parameter indices of each, in reduction order.
  [[nodiscard]] std::vector<std::vector<std::size_t>> buckets() const;

 private:
  struct state;
  explicit gradient_buckets(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace strata
