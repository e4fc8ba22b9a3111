#include "tcp_bootstrap.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace strata {
namespace {

using clock = std::chrono::steady_clock;
constexpr std::uint32_t magic = 0x42525453;  // "STRB"
constexpr std::uint32_t protocol = 1;

class socket_fd {
 public:
  explicit socket_fd(int fd = -1) noexcept : fd_(fd) {}
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  socket_fd(socket_fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  socket_fd& operator=(socket_fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~socket_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

status failure(const std::string& what) {
  return {errc::comm_error, "nccl bootstrap: " + what};
}

int remaining_ms(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Sends or receives all `n` bytes before the deadline.
bool transfer(int fd, void* buf, std::size_t n, bool sending, clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) return false;
    const ssize_t k = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

result<addrinfo*> resolve(const std::string& addr, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (int r = ::getaddrinfo(addr.empty() ? nullptr : addr.c_str(), service.c_str(), &hints, &list);
      r != 0) {
    return failure("cannot resolve " + addr + ":" + service + ": " + ::gai_strerror(r));
  }
  return list;
}

}  // namespace

status serve_bootstrap_id(const std::string& addr, int port, int world_size, const bootstrap_id& id,
                          std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  auto list = resolve(addr, port, true);
  if (!list) return list.error();
  socket_fd listener;
  std::string why = "no address";
  for (addrinfo* a = *list; a != nullptr; a = a->ai_next) {
    socket_fd fd(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    const int on = 1;
    if (fd.get() >= 0 && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
        ::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 128) == 0) {
      listener = std::move(fd);
      break;
    }
    why = std::system_category().message(errno);
  }
  ::freeaddrinfo(*list);
  if (listener.get() < 0) {
    return failure("rank 0 cannot listen on " + addr + ":" + std::to_string(port) + ": " + why);
  }
  std::vector<bool> served(static_cast<std::size_t>(world_size), false);
  served[0] = true;
  for (int left = world_size - 1; left > 0;) {
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) {
      std::string missing;
      for (int r = 1; r < world_size; ++r) {
        if (!served[static_cast<std::size_t>(r)]) {
          missing += ' ';
          missing += std::to_string(r);
        }
      }
      // An error message, once. NOLINTBEGIN(performance-inefficient-string-concatenation)
      return failure("rank 0 waited " + std::to_string(timeout.count()) + " ms at " + addr + ":" +
                     std::to_string(port) + "; rank(s)" + missing + " never connected");
      // NOLINTEND(performance-inefficient-string-concatenation)
    }
    socket_fd peer(::accept(listener.get(), nullptr, nullptr));
    if (peer.get() < 0) continue;
    // A peer gets a few seconds to speak: a stray connection that says
    // nothing must not hold up the ranks behind it.
    const auto peer_deadline = std::min(deadline, clock::now() + std::chrono::seconds(5));
    std::uint32_t hello[4] = {};
    if (!transfer(peer.get(), hello, sizeof hello, false, peer_deadline) || hello[0] != magic ||
        hello[1] != protocol) {
      continue;  // not one of ours (a port scanner, another job): ignore it
    }
    const auto rank = static_cast<int>(hello[2]);
    std::uint32_t answer[2] = {magic, 0};
    if (static_cast<int>(hello[3]) != world_size) {
      answer[1] = 1;
    } else if (rank <= 0 || rank >= world_size || served[static_cast<std::size_t>(rank)]) {
      answer[1] = 2;
    }
    if (!transfer(peer.get(), answer, sizeof answer, true, peer_deadline)) continue;
    if (answer[1] != 0) continue;
    if (!transfer(peer.get(), const_cast<char*>(id.data()), id.size(), true, peer_deadline)) {
      continue;
    }
    served[static_cast<std::size_t>(rank)] = true;
    --left;
  }
  return {};
}

result<bootstrap_id> fetch_bootstrap_id(const std::string& addr, int port, int rank, int world_size,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  std::string why = "no address";
  while (clock::now() < deadline) {
    auto list = resolve(addr, port, false);
    if (!list) return list.error();
    socket_fd fd;
    for (addrinfo* a = *list; a != nullptr && fd.get() < 0; a = a->ai_next) {
      socket_fd s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (s.get() >= 0 && ::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) {
        fd = std::move(s);
      } else {
        why = std::system_category().message(errno);
      }
    }
    ::freeaddrinfo(*list);
    if (fd.get() < 0) {  // rank 0 is not listening yet
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    std::uint32_t hello[4] = {magic, protocol, static_cast<std::uint32_t>(rank),
                              static_cast<std::uint32_t>(world_size)};
    std::uint32_t answer[2] = {};
    if (!transfer(fd.get(), hello, sizeof hello, true, deadline) ||
        !transfer(fd.get(), answer, sizeof answer, false, deadline) || answer[0] != magic) {
      return failure("rank " + std::to_string(rank) + ": the connection to " + addr + ":" +
                     std::to_string(port) + " broke before rank 0 answered");
    }
    if (answer[1] == 1) {
      return failure("rank " + std::to_string(rank) + ": rank 0 has another world size than " +
                     std::to_string(world_size));
    }
    if (answer[1] != 0) {
      return failure("rank " + std::to_string(rank) +
                     ": rank 0 refused it (out of range or "
                     "already connected)");
    }
    bootstrap_id id{};
    if (!transfer(fd.get(), id.data(), id.size(), false, deadline)) {
      return failure("rank " + std::to_string(rank) + ": the connection broke before the id came");
    }
    return id;
  }
  return failure("rank " + std::to_string(rank) + " found no rank 0 at " + addr + ":" +
                 std::to_string(port) + " within " + std::to_string(timeout.count()) +
                 " ms (last error: " + why + ")");
}

}  // namespace strata
