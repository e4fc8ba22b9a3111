#include "pressure_handlers.hpp"

#include <algorithm>
#include <string>

namespace strata {

std::uint64_t pressure_handlers::add(handler h) {
  std::lock_guard lock(mu_);
  const std::uint64_t id = next_++;
  list_.emplace_back(id, std::make_shared<const handler>(std::move(h)));
  return id;
}

status pressure_handlers::remove(std::uint64_t id) {
  std::lock_guard lock(mu_);
  const auto n = std::erase_if(list_, [&](const auto& e) { return e.first == id; });
  if (n == 0) {
    return {errc::invalid_argument,
            "remove_pressure_handler: no handler with id " + std::to_string(id)};
  }
  return {};
}

pressure_handlers::outcome pressure_handlers::relieve(std::size_t bytes) {
  std::vector<std::shared_ptr<const handler>> handlers;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, h] : list_) handlers.push_back(h);
  }
  outcome out;
  if (handlers.empty()) return out;
  out.asked = bytes;
  for (const auto& h : handlers) {
    try {
      out.freed += (*h)(bytes - std::min(out.freed, bytes));
    } catch (...) {
      ++out.failures;  // a failing handler does not break the chain
    }
    if (out.freed >= bytes) break;
  }
  return out;
}

}  // namespace strata
