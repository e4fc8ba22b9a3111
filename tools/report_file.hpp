// Writing a report the `strata` command was asked for (--json, --html,
// --snapshot): the whole text to `path`, or a message on stderr naming
// the command and the file.
//
// Thread safety: a free function; concurrent calls write different files.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

namespace strata {

/// False (and a message "strata COMMAND: cannot write PATH") when the file
/// cannot be written in full.
inline bool write_report(const char* command, const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "strata %s: cannot write %s\n", command, path.c_str());
    return false;
  }
  return true;
}

}  // namespace strata
