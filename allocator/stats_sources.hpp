// Counters the layers above the allocator report through it: the residency
// manager's tiers, the prefetcher. Each source is a named section; its
// counters appear in stats() as "<section>.<name>" (so in every stats JSON
// built from it) and as a section of memory_summary().
//
// Invariants: ids are unique and never 0; a source removed while it is
// being read finishes that read (the reader holds its own reference).
//
// Thread safety: every call may be made from any thread; `read` calls the
// sources with no lock held, so a source may take its own locks and call
// into the allocator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "strata/error.hpp"
#include "strata/strata.hpp"

namespace strata {

class stats_sources {
 public:
  using source = std::function<stat_map()>;

  // Registers `read` under `section`; returns its id.
  std::uint64_t add(std::string section, source read);
  // Unregisters source `id`. Errors: invalid_argument if there is none.
  status remove(std::uint64_t id);

  // Every source's counters, by section, in registration order.
  [[nodiscard]] std::vector<std::pair<std::string, stat_map>> read();
  // Adds every source's counters to `into` as "<section>.<name>".
  void merge_into(stat_map& into);
  // memory_summary()'s sections: one per source, its counters in rows of
  // two, framed as the allocator's own table (79 columns); "" if none.
  [[nodiscard]] std::string summary();

 private:
  struct entry {
    std::uint64_t id;
    std::string section;
    std::shared_ptr<const source> read;
  };
  std::mutex mu_;  // guards list_ and next_ only; never held while a source runs
  std::vector<entry> list_;
  std::uint64_t next_ = 1;
};

}  // namespace strata
