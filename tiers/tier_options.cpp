// The tiers' section of STRATA_CONF: the table of tier_options, its checks
// and its conf_section (strata/conf_text.hpp). docs/configuration.md's
// "tiers" table is rendered from this table, and a test keeps the two
// equal.
#include <array>
#include <utility>

#include "strata/tier_options.hpp"

namespace strata {

namespace {

using tier_spec = option_spec<tier_options>;

const std::array<tier_spec, 13> tier_rows{{
    {bytes_or_none_rule("host_capacity", 1ULL << 20, 0,
                        "the most pinned host memory the residency manager's host "
                        "pool holds, at least `host_chunk`; past it, spills go to NVMe "
                        "([tiers.md](tiers.md))"),
     [](tier_options& o) -> option_field { return &o.host_capacity; }},
    {bytes_rule("host_chunk", 64ULL << 10, 1ULL << 30,
                "pinned memory the host pool's small-buffer runs take from the device "
                "at a time (buffers below `host_large`)"),
     [](tier_options& o) -> option_field { return &o.host_chunk; }},
    {bytes_rule("host_large", 4096, 1ULL << 30,
                "host buffers of this size or more get one pinned allocation each"),
     [](tier_options& o) -> option_field { return &o.host_large; }},
    {{.name = "host_kept",
      .kind = value_kind::number,
      .high = 1.0,
      .doc = "how far past its peak of bytes in use the host pool may pin memory to keep "
             "freed large buffers for reuse, as a fraction of that peak"},
     [](tier_options& o) -> option_field { return &o.host_kept; }},
    {bytes_rule("host_lookahead", 0, option_no_max,
                "how far ahead, in bytes of upcoming acquires, a prefetcher reads buffers on NVMe "
                "into pinned host memory (for host holds, at most an eighth of `host_capacity` "
                "when that is set); also the host room (at most `host_capacity`) the residency "
                "manager's write-behind keeps makeable without a write"),
     [](tier_options& o) -> option_field { return &o.host_lookahead; }},
    {{.name = "nvme_dir",
      .kind = value_kind::text,
      .unit = "a directory on a disk (no commas)",
      .doc = "where the NVMe tier's unnamed file lives; none: no NVMe tier"},
     [](tier_options& o) -> option_field { return &o.nvme_dir; }},
    {bytes_rule("nvme_block_size", 4096, 1ULL << 30,
                "bytes per NVMe request; a multiple of the directory's direct-I/O "
                "block"),
     [](tier_options& o) -> option_field { return &o.nvme_block_size; }},
    {{.name = "nvme_queue_depth",
      .kind = value_kind::count,
      .min = 1,
      .max = 4096,
      .doc = "NVMe requests in flight"},
     [](tier_options& o) -> option_field { return &o.nvme_queue_depth; }},
    {bytes_or_none_rule("nvme_capacity", 1ULL << 20, 0,
                        "the most bytes in the NVMe file; `none`: until the disk is "
                        "full"),
     [](tier_options& o) -> option_field { return &o.nvme_capacity; }},
    {flag_rule("nvme_verify",
               "read every spill back from the disk and check it before its host "
               "copy is freed (one more read per spill)"),
     [](tier_options& o) -> option_field { return &o.nvme_verify; }},
    {flag_rule(
         "nvme_write_behind",
         "while the host tier could not make `host_lookahead` bytes of room "
         "without a write, write host buffers to NVMe in the background, so that pushing them "
         "off the host later writes nothing ([tiers.md](tiers.md))"),
     [](tier_options& o) -> option_field { return &o.nvme_write_behind; }},
    {flag_rule(
         "nvme_model",
         "on a timing-only device (`sim:...,data=none`, `strata plan`): model "
         "the NVMe tier instead of opening a file: extents are accounted, no byte is written, "
         "and each request takes its bytes at `nvme_model_gbps` on the calling thread's "
         "modeled clock, one request at a time ([tiers.md](tiers.md)); `nvme_dir` is not "
         "used, and `nvme_write_behind` must be off"),
     [](tier_options& o) -> option_field { return &o.nvme_model; }},
    {{.name = "nvme_model_gbps",
      .kind = value_kind::number,
      .high = 1e6,
      .doc = "the modeled NVMe tier's rate for reads and writes alike, GB/s "
             "(10^9 bytes a second); 0: instant"},
     [](tier_options& o) -> option_field { return &o.nvme_model_gbps; }},
}};

// The rule no row can state: the host pool must take at least one chunk.
status check_host_chunk(const tier_options& o) {
  if (o.host_capacity != 0 && o.host_capacity < o.host_chunk) {
    return {errc::invalid_argument,
            "host_capacity " + format_byte_option(o.host_capacity) + " is less than host_chunk " +
                format_byte_option(o.host_chunk) + ": the host pool could not take one chunk"};
  }
  return {};
}

constexpr conf_section tier_section =
    make_conf_section<tier_options, tier_option_table, check_tier_options>("tiers");

}  // namespace

std::span<const option_spec<tier_options>> tier_option_table() {
  return tier_rows;
}

status check_tier_options(const tier_options& options) {
  if (auto s = check_options(tier_option_table(), options); !s) return s;
  return check_host_chunk(options);
}

result<tier_options> tier_options_from(const conf_text& conf, tier_options defaults) {
  return section_from(conf, tier_option_table(), std::move(defaults), check_host_chunk);
}

result<tier_options> parse_tier_conf(std::string_view text) {
  return parse_section(text, tier_options_from);
}

const conf_section& tier_conf_section() {
  return tier_section;
}

}  // namespace strata
