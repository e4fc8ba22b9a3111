// Options of the offload tiers (docs/tiers.md): the tiers' section of
// STRATA_CONF (strata/conf_text.hpp), read by the residency manager
// (strata/residency.hpp), its pinned host pool and its NVMe store
// (strata/nvme_store.hpp). docs/configuration.md's "tiers" table is
// rendered from tier_option_table().
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "strata/conf_text.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

struct tier_options {
  /// Most pinned host bytes; 0: no limit.
  std::uint64_t host_capacity = 0;
  /// Pinned memory the host pool's small-buffer runs take from the device at a time.
  std::uint64_t host_chunk = 2ULL << 20;
  /// Host buffers of this size or more get one pinned allocation each.
  std::uint64_t host_large = 256ULL << 10;
  /// How far past its peak of bytes in use the host pool may pin memory to
  /// keep freed large buffers for reuse, as a fraction of that peak.
  double host_kept = 0.05;
  /// Bytes of upcoming acquires whose buffers a prefetcher reads from NVMe
  /// to the host, and the host room the write-behind keeps makeable
  /// without a write.
  std::uint64_t host_lookahead = 2ULL << 30;
  /// Directory of the NVMe tier's file; empty: no NVMe tier.
  std::string nvme_dir{};
  /// Bytes per NVMe request.
  std::uint64_t nvme_block_size = 1ULL << 20;
  /// NVMe requests in flight, 1 to 4096.
  std::uint64_t nvme_queue_depth = 32;
  /// Most bytes in the NVMe file; 0: until the disk is full.
  std::uint64_t nvme_capacity = 0;
  /// Read every spill back from the disk and check it before the host copy
  /// is freed (one more read of each spilled buffer).
  bool nvme_verify = true;
  /// Write host buffers to NVMe in the background while the host tier is
  /// short of room (the residency manager's write-behind, docs/tiers.md).
  bool nvme_write_behind = true;
  /// On a timing-only device: a modeled NVMe tier (no file, no byte
  /// written; each request takes its bytes at nvme_model_gbps on the
  /// calling thread's modeled clock) instead of one in nvme_dir.
  bool nvme_model = false;
  /// The modeled NVMe tier's rate, GB/s; 0: instant.
  double nvme_model_gbps = 3.0;
};

/// The tiers' STRATA_CONF keys: kind, range, doc, field.
STRATA_API std::span<const option_spec<tier_options>> tier_option_table();

/// This section of STRATA_CONF (strata/conf_text.hpp).
STRATA_API const conf_section& tier_conf_section();

/// Checks options a program filled in itself against the table's ranges
/// and host_capacity >= host_chunk; parsed options always pass. The
/// residency manager calls it when it is made; the parts it is built from
/// (the host pool, the NVMe store) trust the values. Errors:
/// invalid_argument naming the key.
STRATA_API status check_tier_options(const tier_options& options);

/// The tiers' section of `conf` over `defaults`. Errors: invalid_argument
/// naming the key (check_tier_options).
STRATA_API result<tier_options> tier_options_from(const conf_text& conf,
                                                  tier_options defaults = {});

/// Parses STRATA_CONF text (conf_text::parse) and returns the tiers'
/// section. Errors: conf_text::parse's, check_tier_options'.
STRATA_API result<tier_options> parse_tier_conf(std::string_view text);

}  // namespace strata
