#include "plan/nvme_rate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>

namespace strata::plan {

namespace {

constexpr std::size_t request = 4ULL << 20;

// `what` failed: said in the flag's terms, with the system's reason.
status io_failure(const std::string& dir, const char* what, int err) {
  return {errc::io_error, "--nvme-dir " + dir + ": measuring the disk, " + what + ": " +
                              std::system_category().message(err)};
}

// Moves `bytes` through `fd` in requests from `buf`; seconds taken.
result<double> transfer(int fd, void* buf, std::uint64_t bytes, bool write,
                        const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t at = 0; at < bytes; at += request) {
    const auto off = static_cast<off_t>(at);
    const ssize_t n = write ? ::pwrite(fd, buf, request, off) : ::pread(fd, buf, request, off);
    if (n < 0) return io_failure(dir, write ? "a write failed" : "a read failed", errno);
    if (static_cast<std::size_t>(n) != request) {
      return io_failure(dir, write ? "a write stopped short" : "a read stopped short", ENOSPC);
    }
  }
  if (write && ::fsync(fd) != 0) return io_failure(dir, "flushing the writes failed", errno);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

result<nvme_rates> measure_nvme(const std::string& dir, std::uint64_t bytes) {
  if (bytes < request) return status{errc::invalid_argument, "measure at least 4 MiB"};
  bytes = bytes / request * request;
  std::string path = dir + "/strata-plan-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return io_failure(dir, "a scratch file could not be made", errno);
  ::unlink(path.c_str());  // gone when closed, whatever happens below
  const auto closer = [](const int* f) { ::close(*f); };
  const std::unique_ptr<const int, decltype(closer)> guard(&fd, closer);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    return io_failure(dir, "direct I/O (O_DIRECT) is not available there", errno);
  }
  void* raw = nullptr;
  if (::posix_memalign(&raw, 4096, request) != 0)
    return status{errc::out_of_memory, "4 MiB buffer"};
  const std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
  std::memset(raw, 0x5a, request);
  auto w = transfer(fd, raw, bytes, true, dir);
  if (!w) return w.error();
  auto r = transfer(fd, raw, bytes, false, dir);
  if (!r) return r.error();
  const auto gb = static_cast<double>(bytes) / 1e9;
  return nvme_rates{gb / *w, gb / *r};
}

}  // namespace strata::plan
