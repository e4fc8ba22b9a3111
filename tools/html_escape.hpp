// Text for an HTML page: the reports' one escaping rule (<, >, & and ").
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace strata {

inline std::string html_escape(std::string_view s) {
  std::string o;
  for (const char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

}  // namespace strata
