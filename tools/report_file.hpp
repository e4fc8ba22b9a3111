// Writing a report the `strata` command was asked for (--json, --html,
// --snapshot): the whole text to `path`, or a message on stderr naming
// the command, the file and why (the system's reason).
//
// Thread safety: a free function; concurrent calls write different files.
#pragma once

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>

namespace strata {

/// False (and a message "strata COMMAND: cannot write PATH: REASON") when
/// the file cannot be written in full.
inline bool write_report(const char* command, const std::string& path, const std::string& text) {
  const auto fail = [&](int err) {
    std::fprintf(stderr, "strata %s: cannot write %s: %s\n", command, path.c_str(),
                 std::system_category().message(err).c_str());
    return false;
  };
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) return fail(errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int write_err = errno;
  if (std::fclose(out) != 0) return fail(errno);
  if (!written) return fail(write_err != 0 ? write_err : EIO);
  return true;
}

}  // namespace strata
