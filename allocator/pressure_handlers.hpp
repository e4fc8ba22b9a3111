// The memory-pressure handlers: callbacks the OOM chain asks to free device
// memory (the residency manager spills buffers this way) before a request
// fails.
//
// Invariants: ids are unique and never 0; a handler removed while it is
// being called finishes that call (the chain holds its own reference).
//
// Thread safety: every call may be made from any thread; `relieve` calls
// the handlers with no lock held, so a handler may allocate, free, add or
// remove handlers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "strata/error.hpp"

namespace strata {

class pressure_handlers {
 public:
  // Asked to free `bytes`; returns the bytes it freed.
  using handler = std::function<std::size_t(std::size_t bytes)>;

  // Registers `h`; returns its id.
  std::uint64_t add(handler h);
  // Unregisters handler `id`. Errors: invalid_argument if there is none.
  status remove(std::uint64_t id);

  struct outcome {
    std::size_t asked = 0;     // bytes asked for (0: no handler registered)
    std::size_t freed = 0;     // bytes the handlers said they freed
    std::size_t failures = 0;  // handlers that threw (counted as freeing nothing)
  };
  // Calls the handlers in registration order, each asked for what is still
  // missing of `bytes`, until together they freed `bytes`.
  outcome relieve(std::size_t bytes);

 private:
  std::mutex mu_;  // guards list_ and next_ only; never held while a handler runs
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const handler>>> list_;
  std::uint64_t next_ = 1;
};

}  // namespace strata
