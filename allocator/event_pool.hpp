// Recycled device events: creating an event is a driver call, so events are
// kept and reused. Grows on demand; shrinks only when destroyed.
//
// Thread safety: none; the owner serializes calls.
#pragma once

#include <vector>

#include "strata/device.hpp"

namespace strata {

class event_pool {
 public:
  explicit event_pool(device& dev) : dev_(dev) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  event_pool(event_pool&&) = delete;
  event_pool& operator=(event_pool&&) = delete;
  /// Destroys every event it holds (events handed out must be returned first).
  ~event_pool();

  /// An event: a recycled one, or a new one from the device.
  result<event_handle> get();
  /// Takes an event back for reuse.
  void put(event_handle e) { free_.push_back(e); }

 private:
  device& dev_;
  std::vector<event_handle> free_;
};

}  // namespace strata
