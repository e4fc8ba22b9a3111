// Options of the gradient buckets (docs/gradients.md): the gradients'
// section of STRATA_CONF (strata/conf_text.hpp), read by
// strata::gradient_buckets (strata/gradient_buckets.hpp).
// docs/configuration.md's "gradients" table is rendered from
// bucket_option_table().
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "strata/communicator.hpp"
#include "strata/conf_text.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/kernels.hpp"
#include "strata/option_table.hpp"

namespace strata {

/// Options of `gradient_buckets`; all but `op` and `rebuild` are STRATA_CONF
/// keys.
struct bucket_options {
  /// The first bucket's limit (DDP: 1 MiB); 0: each gradient a bucket alone.
  std::uint64_t first_bucket_bytes = 1ULL << 20;
  /// Later buckets' limit (DDP: 25 MiB); 0: each gradient a bucket alone.
  std::uint64_t bucket_bytes = 25ULL << 20;
  /// Staging buffers of the copy mode and of a cast reduction (reductions
  /// that may be queued with their own staging), 1 to 64. Unused with
  /// gradient_as_bucket_view and no cast.
  std::uint64_t buckets_inflight = 2;
  reduce_op op = reduce_op::avg;
  /// The dtype the buckets are reduced in (STRATA_CONF's
  /// `bucket_reduce_dtype`); unset (`same`): each bucket's own. A bucket of
  /// another dtype is cast to it for the all-reduce and back (see
  /// strata/gradient_buckets.hpp). For bf16 the result is exact to this
  /// rule: each rank's value (fp32, times 1/n for avg) rounded to bf16, the
  /// bf16 values summed in fp32 in rank order and rounded once to bf16 (the
  /// `local` communicator's order; NCCL's is its own), then widened back
  /// exactly.
  std::optional<dtype> reduce_type;
  /// Buckets are slices of the gradient buffer, reduced in place (no copy).
  bool gradient_as_bucket_view = true;
  /// Rebuild the buckets from the ready order observed in the first step.
  bool rebuild = true;
};

/// The gradients' STRATA_CONF keys: kind, range, doc, field.
STRATA_API std::span<const option_spec<bucket_options>> bucket_option_table();

/// This section of STRATA_CONF (strata/conf_text.hpp).
STRATA_API const conf_section& bucket_conf_section();

/// Checks options a program filled in itself against the table's ranges;
/// parsed options always pass. gradient_buckets::create calls it. Errors:
/// invalid_argument naming the key.
STRATA_API status check_bucket_options(const bucket_options& options);

/// The gradients' section of `conf` over `defaults` (`op` and `rebuild`
/// keep theirs). Errors: invalid_argument naming the key.
STRATA_API result<bucket_options> bucket_options_from(const conf_text& conf,
                                                      bucket_options defaults = {});

/// Parses STRATA_CONF text (conf_text::parse) and returns the gradients'
/// section. Errors: conf_text::parse's.
STRATA_API result<bucket_options> parse_bucket_conf(std::string_view text);

}  // namespace strata
