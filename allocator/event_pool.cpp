#include "event_pool.hpp"

namespace strata {

event_pool::~event_pool() {
  for (auto e : free_) (void)dev_.destroy_event(e);
}

result<event_handle> event_pool::get() {
  if (!free_.empty()) {
    const event_handle e = free_.back();
    free_.pop_back();
    return e;
  }
  return dev_.create_event();
}

}  // namespace strata
