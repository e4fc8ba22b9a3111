// Making `nccl` communicators from torchrun's environment (the id served
// over TCP by rank 0, tcp_bootstrap.hpp).
#include <cerrno>
#include <cstdlib>
#include <string>

#include "strata/nccl.hpp"
#include "tcp_bootstrap.hpp"

namespace strata {
namespace {

// The variable as an int in [lo, hi]; `fallback` when unset and optional.
result<int> env_int(const char* name, int lo, int hi, const int* fallback) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once at start-up
  if (v == nullptr || *v == '\0') {
    if (fallback != nullptr) return *fallback;
    return status{errc::invalid_argument, std::string("nccl bootstrap: ") + name +
                                              " is not set (run under torchrun or set it)"};
  }
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) {
    return status{errc::invalid_argument, std::string("nccl bootstrap: ") + name + "=" + v +
                                              " is not a number in [" + std::to_string(lo) + ", " +
                                              std::to_string(hi) + "]"};
  }
  return static_cast<int>(n);
}

}  // namespace

result<launcher_env> launcher_env_from_environment() {
  constexpr int max_ranks = 1 << 20;
  launcher_env env;
  auto world = env_int("WORLD_SIZE", 1, max_ranks, nullptr);
  if (!world) return world.error();
  auto rank = env_int("RANK", 0, *world - 1, nullptr);
  if (!rank) return rank.error();
  const int zero = 0;
  auto local = env_int("LOCAL_RANK", 0, max_ranks, &zero);
  if (!local) return local.error();
  auto port = env_int("MASTER_PORT", 1, 65535, nullptr);
  if (!port) return port.error();
  const char* addr = std::getenv("MASTER_ADDR");  // NOLINT(concurrency-mt-unsafe)
  if (addr == nullptr || *addr == '\0') {
    return status{errc::invalid_argument,
                  "nccl bootstrap: MASTER_ADDR is not set (run under torchrun or set it)"};
  }
  env.world_size = *world;
  env.rank = *rank;
  env.local_rank = *local;
  env.master_port = *port;
  env.master_addr = addr;
  return env;
}

result<std::unique_ptr<communicator>> create_nccl_communicator(device& dev, const launcher_env& env,
                                                               const nccl_options& options) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size || env.master_port <= 0 ||
      env.master_port > 65535 || env.master_addr.empty()) {
    return status{errc::invalid_argument,
                  "nccl bootstrap: rank " + std::to_string(env.rank) + " of " +
                      std::to_string(env.world_size) + " at " + env.master_addr + ":" +
                      std::to_string(env.master_port) + " is not a valid launcher environment"};
  }
  if (options.bootstrap_timeout.count() <= 0) {
    return status{errc::invalid_argument, "nccl bootstrap: the timeout must be positive"};
  }
  nccl_id id;
  if (env.rank == 0) {
    auto made = nccl_unique_id(options);
    if (!made) return made.error();
    id = *made;
    if (env.world_size > 1) {
      if (auto s = serve_bootstrap_id(env.master_addr, env.master_port, env.world_size, id.bytes,
                                      options.bootstrap_timeout);
          !s) {
        return s;
      }
    }
  } else {
    auto fetched = fetch_bootstrap_id(env.master_addr, env.master_port, env.rank, env.world_size,
                                      options.bootstrap_timeout);
    if (!fetched) return fetched.error();
    id.bytes = *fetched;
  }
  return create_nccl_communicator(dev, env.rank, env.world_size, id, options);
}

}  // namespace strata
