// The gradients' section of STRATA_CONF: the table of bucket_options, its
// check and its conf_section (strata/conf_text.hpp). docs/configuration.md's
// "gradients" table is rendered from this table, and a test keeps the two
// equal.
#include <array>
#include <string>

#include "strata/bucket_options.hpp"

namespace strata {

namespace {

using bucket_spec = option_spec<bucket_options>;

// bucket_reduce_dtype's words, stored as bucket_options::reduce_type.
bool set_reduce_dtype(void* target, std::string_view value) {
  auto& type = *static_cast<std::optional<dtype>*>(target);
  if (value == "same") {
    type.reset();
  } else if (value == "f32") {
    type = dtype::f32;
  } else if (value == "bf16") {
    type = dtype::bf16;
  } else if (value == "f16") {
    type = dtype::f16;
  } else {
    return false;
  }
  return true;
}

std::string reduce_dtype_text(const void* target) {
  const auto& type = *static_cast<const std::optional<dtype>*>(target);
  if (!type) return "same";
  switch (*type) {
    case dtype::f32:
      return "f32";
    case dtype::bf16:
      return "bf16";
    case dtype::f16:
      return "f16";
  }
  return "not a dtype";
}

const std::array<bucket_spec, 5> bucket_rows{{
    {bytes_rule("first_bucket_bytes", 0, option_no_max,
                "the first bucket's limit ([gradients.md](gradients.md); DDP's "
                "`first_bucket_cap`); `0`: each gradient a bucket of its own"),
     [](bucket_options& o) -> option_field { return &o.first_bucket_bytes; }},
    {bytes_rule("bucket_bytes", 0, option_no_max,
                "later buckets' limit; a larger gradient is a bucket alone (DDP's "
                "`bucket_cap_mb`); `0`: each gradient a bucket of its own"),
     [](bucket_options& o) -> option_field { return &o.bucket_bytes; }},
    {{.name = "buckets_inflight",
      .kind = value_kind::count,
      .min = 1,
      .max = 64,
      .doc = "staging buffers of copied or cast buckets (reductions queued "
             "with their own staging)"},
     [](bucket_options& o) -> option_field { return &o.buckets_inflight; }},
    {{.name = "bucket_reduce_dtype",
      .kind = value_kind::text,
      .unit = "`same`, `f32`, `bf16` or `f16`",
      .doc = "the dtype buckets are all-reduced in; `same`: each bucket's "
             "own, others: cast there and back (`bf16` halves fp32 gradients' bytes on the "
             "wire)"},
     [](bucket_options& o) -> option_field {
       return option_converter{&o.reduce_type, set_reduce_dtype, reduce_dtype_text};
     }},
    {flag_rule("gradient_as_bucket_view",
               "the buckets are slices of the gradient buffer, reduced in place "
               "(no copy); `false`: packed into staging buffers, as DDP does by default"),
     [](bucket_options& o) -> option_field { return &o.gradient_as_bucket_view; }},
}};

constexpr conf_section bucket_section =
    make_conf_section<bucket_options, bucket_option_table, check_bucket_options>("gradients");

}  // namespace

std::span<const option_spec<bucket_options>> bucket_option_table() {
  return bucket_rows;
}

status check_bucket_options(const bucket_options& options) {
  return check_options(bucket_option_table(), options);
}

result<bucket_options> bucket_options_from(const conf_text& conf, bucket_options defaults) {
  return section_from(conf, bucket_option_table(), defaults);
}

result<bucket_options> parse_bucket_conf(std::string_view text) {
  return parse_section(text, bucket_options_from);
}

const conf_section& bucket_conf_section() {
  return bucket_section;
}

}  // namespace strata
