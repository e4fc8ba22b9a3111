// The replay's report: text for the terminal, JSON with stable field names
// (docs/replay.md), and a self-contained HTML page (html_report.cpp).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "alloc_trace.hpp"
#include "replayer.hpp"

namespace strata::replay {

/// `s` with bytes outside printable ASCII written as \xNN (for names read
/// from a file, before they reach a terminal).
[[nodiscard]] std::string printable(std::string_view s);

/// "timeline: allocator added X ms over Y ms of trace (Z%); second half:
/// Z2%, N driver calls" (N: memory driver calls in the second half).
[[nodiscard]] std::string timeline_line(const timeline_result& t);

/// The steady state in words: "the last step (N calls, T ms) repeated R
/// times after the trace: the last M added Z%, K driver calls", or that
/// the trace ends in no repeated step.
[[nodiscard]] std::string steady_text(const timeline_result::steady_state& s);

/// One of the costliest calls of a replay of `trace` in words: "event N:
/// alloc 1.53 GiB, K driver calls, T ms", and with `mark_second_half`, for
/// a call in a timeline replay's second half, " (second half)".
[[nodiscard]] std::string costly_text(const alloc_trace& trace, const costly_call& c,
                                      bool mark_second_half);

/// How many of replay_result::costliest the text report lists.
inline constexpr std::size_t costliest_in_text = 5;

[[nodiscard]] std::string report_text(const alloc_trace& trace, const replay_result& r);
[[nodiscard]] std::string report_json(const alloc_trace& trace, const replay_result& r);
[[nodiscard]] std::string report_html(const alloc_trace& trace, const replay_result& r);

}  // namespace strata::replay
