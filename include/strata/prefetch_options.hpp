// Options of the prefetcher (docs/prefetch.md): the prefetch section of
// STRATA_CONF (strata/conf_text.hpp), read by strata::prefetcher
// (strata/prefetcher.hpp). How far ahead NVMe is read into host memory is
// the tiers' `host_lookahead` (strata/tier_options.hpp), which the
// prefetcher takes from its residency manager. docs/configuration.md's
// "prefetch" table is rendered from prefetch_option_table().
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "strata/conf_text.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/option_table.hpp"

namespace strata {

struct prefetch_options {
  /// Most device bytes in prefetch fills in flight plus prefetched buffers
  /// not yet acquired; 0 turns prefetch off.
  std::uint64_t prefetch_bytes = 512ULL << 20;
  /// Prefetch fills outstanding at once (NVMe reads and device copies), 1 to 1024.
  std::uint64_t prefetch_inflight = 16;
  /// Bytes of upcoming acquires whose buffers are copied to the device.
  std::uint64_t device_lookahead = 512ULL << 20;
  /// A released buffer needed again within this many bytes of acquires is
  /// spilled only when nothing else can be.
  std::uint64_t reuse_distance = 0;
};

/// The prefetcher's STRATA_CONF keys: kind, range, doc, field.
STRATA_API std::span<const option_spec<prefetch_options>> prefetch_option_table();

/// This section of STRATA_CONF (strata/conf_text.hpp).
STRATA_API const conf_section& prefetch_conf_section();

/// Checks options a program filled in itself against the table's ranges;
/// parsed options always pass. prefetcher::create calls it. Errors:
/// invalid_argument naming the key.
STRATA_API status check_prefetch_options(const prefetch_options& options);

/// The prefetch section of `conf` over `defaults`. Errors: invalid_argument
/// naming the key.
STRATA_API result<prefetch_options> prefetch_options_from(const conf_text& conf,
                                                          prefetch_options defaults = {});

/// Parses STRATA_CONF text (conf_text::parse) and returns the prefetch
/// section. Errors: conf_text::parse's.
STRATA_API result<prefetch_options> parse_prefetch_conf(std::string_view text);

}  // namespace strata
