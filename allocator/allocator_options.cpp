// The allocator's section of STRATA_CONF: the table of allocator_options,
// its checks and its conf_section (strata/conf_text.hpp).
// docs/configuration.md's "allocator" table is rendered from this table,
// and a test keeps the two equal.
#include "strata/allocator_options.hpp"

#include <array>
#include <utility>

#include "strata/option_table.hpp"

namespace strata {

namespace {

using allocator_spec = option_spec<allocator_options>;

const std::array<allocator_spec, 9> allocator_rows{{
    {{.name = "device",
      .kind = value_kind::text,
      .unit = "a device spec (docs/device.md): `auto`, `cuda`, `cuda:N`, `sim[:key=value,...]`",
      .doc = "the GPU to allocate on; `auto` never falls back to `sim`"},
     [](allocator_options& o) -> option_field { return &o.device; }},
    {bytes_or_none_rule(
         "release_threshold", 0, option_no_max,
         "idle pages (free memory the allocator keeps mapped or pooled) above this are "
         "returned to the device after frees (`0`: all of them); `none` keeps "
         "everything cached until `empty_cache`/`trim` or memory pressure"),
     [](allocator_options& o) -> option_field { return &o.release_threshold; }},
    {bytes_rule("small_size", 512, 64ULL << 20,
                "requests up to this size (rounded down to a multiple of 512 bytes) are \"small\": "
                "counted in the `small_pool` stats; those up to min(small_size, 512 KiB) come from "
                "size-class slabs"),
     [](allocator_options& o) -> option_field { return &o.small_size; }},
    {{.name = "memory_fraction",
      .kind = value_kind::number,
      .high = 1.0,
      .low_open = true,
      .doc = "the share of the device's memory the allocator may hold; past it, requests fail "
             "with `out_of_memory` (also settable at run time with `set_memory_fraction`)"},
     [](allocator_options& o) -> option_field { return &o.memory_fraction; }},
    {{.name = "trace_buffer",
      .kind = value_kind::count,
      .max = max_trace_buffer,
      .unit = "a count of events",
      .doc = "the event trace's ring size (docs/allocator.md, \"Event trace\"); 0 turns the trace "
             "off. With the trace on, every allocate and free takes the locked path (no "
             "thread-cache fast path), so the trace is complete and in order; an event costs "
             "about 24 ns and 40 bytes"},
     [](allocator_options& o) -> option_field { return &o.trace_buffer; }},
    {{.name = "trace_frames",
      .kind = value_kind::count,
      .max = max_trace_frames,
      .unit = "a count of frames",
      .doc = "native stack frames captured with each trace event (`backtrace()`), symbolized "
             "when a snapshot pickle is written, so PyTorch's viewer shows where each block was "
             "allocated; 0: none. Costs one `backtrace()` per event (bench/RESULTS.md) and "
             "`trace_buffer` x `trace_frames` x 8 bytes, at most 1 GiB"},
     [](allocator_options& o) -> option_field { return &o.trace_frames; }},
    {flag_rule(
         "log_ooms",
         "print each out-of-memory report to stderr as `strata: ...` when a request fails "
         "after the whole OOM chain; the report is returned with the error and kept for "
         "`last_oom_report()` either way (`strata replay` turns it off: its report lists every "
         "OOM)"),
     [](allocator_options& o) -> option_field { return &o.log_ooms; }},
    {flag_rule(
         "wait_before_grow",
         "when a request needs pages and freed memory is still waiting on events (frees "
         "pending on other streams, pages another stream's queued work holds), wait for it "
         "before creating new pages (`true`: least memory, a host wait of up to the GPU's lag), "
         "or create first and wait only when the device is full (`false`: no host wait where "
         "growing is possible)"),
     [](allocator_options& o) -> option_field { return &o.wait_before_grow; }},
    {bytes_rule(
         "page_run_size", 0, 1ULL << 40,
         "new pages are created in physical runs of up to this size (rounded down to the "
         "device granularity; `0`: one page a run). A driver call costs about the same "
         "whatever the run's size, so larger runs cost fewer calls as memory grows, but a "
         "run maps, moves and is released only whole: its idle pages serve no other request "
         "while any page of it holds live bytes, so reserved memory grows (docs/allocator.md, "
         "\"Page runs\")"),
     [](allocator_options& o) -> option_field { return &o.page_run_size; }},
}};

// The rule no row of the table can state: the frames' budget across two
// fields.
status check_frames_budget(const allocator_options& o) {
  if (o.trace_buffer * o.trace_frames * sizeof(void*) > max_frame_bytes) {
    return {errc::invalid_argument, "trace_buffer " + std::to_string(o.trace_buffer) +
                                        " x trace_frames " + std::to_string(o.trace_frames) +
                                        " needs more than 1 GiB of frames: fewer events or frames"};
  }
  return {};
}

constexpr conf_section allocator_section =
    make_conf_section<allocator_options, allocator_option_table, check_allocator_options>(
        "allocator");

}  // namespace

std::span<const option_spec<allocator_options>> allocator_option_table() {
  return allocator_rows;
}

status check_allocator_options(const allocator_options& options) {
  if (auto s = check_options(allocator_option_table(), options); !s) return s;
  return check_frames_budget(options);
}

result<allocator_options> allocator_options_from(const conf_text& conf,
                                                 allocator_options defaults) {
  return section_from(conf, allocator_option_table(), std::move(defaults), check_frames_budget);
}

result<allocator_options> parse_allocator_conf(std::string_view text, allocator_options defaults) {
  auto conf = conf_text::parse(text);
  if (!conf) return conf.error();
  return allocator_options_from(*conf, std::move(defaults));
}

result<allocator_options> allocator_options_from_env() {
  auto conf = conf_text::from_env();
  if (!conf) return conf.error();
  return allocator_options_from(*conf);
}

const conf_section& allocator_conf_section() {
  return allocator_section;
}

}  // namespace strata
