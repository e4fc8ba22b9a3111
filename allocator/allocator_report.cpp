// memory_summary(), snapshot_json(), page_map(), owns() and
// available_memory(): what the allocator holds, for people, tools and the
// integrations.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <sstream>

#include "caching_allocator.hpp"
#include "strata/json_string.hpp"
#include "strata/option_table.hpp"

namespace strata {

namespace {

std::string hex(std::uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%" PRIxPTR "\"", v);
  return buf;
}

const char* state_name(const block_info& b) {
  if (is_parked(b)) return "thread_cached";
  switch (b.state) {
    case block_state::free:
      return "free";
    case block_state::allocated:
      return "allocated";
    case block_state::pending:
      return "pending_free";
    case block_state::shadow:
      return "shadow";
  }
  return "?";
}

std::string cell(std::int64_t v, bool bytes) {
  char buf[16];
  if (!bytes) {
    std::snprintf(buf, sizeof buf, "%10" PRId64, v);
    return buf;
  }
  return format_bytes(static_cast<std::uint64_t>(v < 0 ? 0 : v));
}

}  // namespace

std::string caching_allocator::memory_summary() {
  std::string own;
  {
    std::lock_guard lock(mu_);
    own = summary_of(current_stats());
  }
  return own + sources_.summary();  // the sources run without the mutex
}

std::uint64_t caching_allocator::add_stats_source(std::string section, stats_sources::source read) {
  return sources_.add(std::move(section), std::move(read));
}

status caching_allocator::remove_stats_source(std::uint64_t id) {
  return sources_.remove(id);
}

stat_map caching_allocator::stats_map() {
  stat_map all = stats().to_map();
  sources_.merge_into(all);
  return all;
}

std::string caching_allocator::summary_of(const allocator_stats& st) {
  std::ostringstream o;
  const std::string rule(79, '-');
  const std::string thick(79, '=');
  char line[128];
  o << '|' << thick.substr(2) << "|\n";
  std::snprintf(line, sizeof line, "| %-75s |\n",
                ("Strata memory summary, " + dev_->name()).substr(0, 75).c_str());
  o << line;
  o << '|' << rule.substr(2) << "|\n";
  std::snprintf(line, sizeof line, "| %-36s | %-36s |\n",
                ("OOMs: " + std::to_string(st.num_ooms)).c_str(),
                ("allocation retries: " + std::to_string(st.num_alloc_retries)).c_str());
  o << line << '|' << thick.substr(2) << "|\n";
  std::snprintf(line, sizeof line, "| %-21s | %-10s | %-10s | %-10s | %-10s |\n", "Metric",
                "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  o << line;
  struct row {
    const char* name;
    const stat_array* stat;
    bool bytes;
  };
  const row rows[] = {{"Allocated memory", &st.allocated_bytes, true},
                      {"Active memory", &st.active_bytes, true},
                      {"Requested memory", &st.requested_bytes, true},
                      {"GPU reserved memory", &st.reserved_bytes, true},
                      {"Non-releasable memory", &st.inactive_split_bytes, true},
                      {"Allocations", &st.allocation, false},
                      {"Active allocs", &st.active, false},
                      {"GPU reserved pages", &st.segment, false},
                      {"Non-releasable allocs", &st.inactive_split, false}};
  for (const row& r : rows) {
    o << '|' << rule.substr(2) << "|\n";
    const char* labels[] = {r.name, "      from large pool", "      from small pool"};
    const stat_pool pools[] = {pool_all, pool_large, pool_small};
    for (int i = 0; i < 3; ++i) {
      const stat& s = (*r.stat)[pools[i]];
      std::snprintf(line, sizeof line, "| %-21s | %10s | %10s | %10s | %10s |\n", labels[i],
                    cell(s.current, r.bytes).c_str(), cell(s.peak, r.bytes).c_str(),
                    cell(s.allocated, r.bytes).c_str(), cell(s.freed, r.bytes).c_str());
      o << line;
    }
  }
  o << '|' << rule.substr(2) << "|\n";
  std::snprintf(line, sizeof line, "| %-36s | %-36s |\n",
                ("Device syncs for frees: " + std::to_string(st.num_sync_all_streams)).c_str(),
                ("Page creates/releases: " + std::to_string(st.num_device_alloc) + "/" +
                 std::to_string(st.num_device_free))
                    .c_str());
  o << line;
  char frag[64];
  std::snprintf(frag, sizeof frag, "Fragmentation: %.1f%% (peak %.1f%%)", 100 * st.fragmentation(),
                100 * st.peak_fragmentation());
  std::snprintf(line, sizeof line, "| %-36s | %-36s |\n", frag,
                ("Stitches: " + std::to_string(st.num_stitches) + " (" +
                 format_bytes(static_cast<std::uint64_t>(st.stitched_bytes)) + ")")
                    .c_str());
  o << line;
  const driver_call_total memory = memory_call_total(st.driver);
  char vm[64];
  std::snprintf(vm, sizeof vm, "Memory driver calls: %llu, %.1f ms",
                static_cast<unsigned long long>(memory.calls),
                static_cast<double>(memory.ns) * 1e-6);
  char waits[64];
  std::snprintf(waits, sizeof waits, "Waits for the device: %lld, %.1f ms",
                static_cast<long long>(st.num_device_waits),
                static_cast<double>(st.device_wait_ns) * 1e-6);
  std::snprintf(line, sizeof line, "| %-36.36s | %-36.36s |\n", vm, waits);
  o << line;
  char locked[64];
  std::snprintf(locked, sizeof locked, "Locked calls: %lld, %.1f ms",
                static_cast<long long>(st.num_locked_calls),
                static_cast<double>(st.locked_call_ns) * 1e-6);
  std::snprintf(line, sizeof line, "| %-36.36s | %-36.36s |\n", locked, "");
  o << line << '|' << thick.substr(2) << "|\n";
  return o.str();
}

std::string caching_allocator::snapshot_json() {
  std::lock_guard lock(mu_);
  std::ostringstream o;
  o << "{\"device\":" << json_string(dev_->name()) << ",\"granularity\":" << pages_.granularity()
    << ",\"limit_bytes\":" << pages_.limit() << ",\"held_pages\":" << pages_.held_pages()
    << ",\"idle_pool_pages\":" << pages_.pool_pages() << ",\"arenas\":[";
  bool first_arena = true;
  for (stream_arena* arena : streams_.arenas()) {
    stream_arena& a = *arena;
    o << (first_arena ? "" : ",") << R"({"stream":)"
      << hex(reinterpret_cast<std::uintptr_t>(a.stream().native)) << R"(,"pool":")"
      << (a.kind() == pool_kind::small ? "small" : "large") << R"(","base":)" << hex(a.base())
      << R"(,"bytes":)" << a.bytes() << R"(,"mapped_pages":[)";
    first_arena = false;
    bool first = true;
    for (std::size_t i = a.next_mapped(0, a.page_count()); i < a.page_count();) {
      std::size_t j = i;
      while (j + 1 < a.page_count() && a.is_mapped(j + 1)) ++j;
      o << (first ? "" : ",") << "{\"first\":" << i << ",\"count\":" << (j - i + 1) << "}";
      first = false;
      i = a.next_mapped(j + 1, a.page_count());
    }
    o << "],\"blocks\":[";
    first = true;
    for (auto it = a.blocks().begin(); it != a.blocks().end(); ++it) {
      const block_info& b = it->second;
      o << (first ? "" : ",") << R"({"address":)" << hex(it->first) << R"(,"size":)" << b.size
        << R"(,"state":")" << state_name(b) << '"';
      const bool in_use = b.in_use();
      if (in_use) {
        o << ",\"requested\":"
          << (b.holder != nullptr ? b.holder->slot().requested.load(std::memory_order_relaxed)
                                  : b.requested);
      }
      const slab* s = a.kind() == pool_kind::small && in_use ? a.slab_of(it->first) : nullptr;
      if (s != nullptr) {
        o << R"(,"slab":{"object_size":)" << s->object_size << R"(,"objects":)" << s->capacity
          << R"(,"free":)" << s->free_count << "}";
      }
      o << "}";
      first = false;
    }
    o << "]}";
  }
  const allocator_stats view = current_stats();
  o << "],\"stats\":{";
  bool first = true;
  for (const auto& [name, value] : view.to_map()) {
    o << (first ? "" : ",") << json_string(name) << ":" << value;
    first = false;
  }
  o << "},\"last_oom\":" << (last_oom_ ? last_oom_->to_json() : std::string("null")) << "}";
  return o.str();
}

std::vector<arena_pages> caching_allocator::page_map() {
  std::lock_guard lock(mu_);
  std::vector<arena_pages> out;
  for (std::size_t k = 0; k < streams_.arenas().size(); ++k) {
    stream_arena& a = *streams_.arenas()[k];
    arena_pages m;
    m.stream = reinterpret_cast<std::uintptr_t>(streams_.owner(k).stream.native);
    m.small = a.kind() == pool_kind::small;
    for (std::size_t i = a.next_mapped(0, a.page_count()); i < a.page_count();
         i = a.next_mapped(i + 1, a.page_count())) {
      m.pages.resize(i + 1, 0);
      m.pages[i] = 1;
    }
    for (auto it = a.blocks().begin(); it != a.blocks().end(); ++it) {
      const block_info& b = it->second;
      if (!b.in_use() || is_parked(b)) continue;
      for (std::size_t i = a.page_of(it->first);
           i <= a.page_of(it->first + b.size - 1) && i < m.pages.size(); ++i) {
        m.pages[i] = 2;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

bool caching_allocator::owns(const void* ptr) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  return std::any_of(streams_.arenas().begin(), streams_.arenas().end(),
                     [p](const stream_arena* a) { return a->contains(p); });
}

std::optional<std::size_t> caching_allocator::live_bytes_from(const void* ptr) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  const std::size_t k = streams_.arena_of(p);
  if (k == streams_.arenas().size()) return std::nullopt;
  stream_arena& arena = *streams_.arenas()[k];
  if (arena.kind() == pool_kind::small) {
    const slab* s = arena.slab_of(p);
    if (s == nullptr) return 0;
    const std::size_t i = (p - s->base) / s->object_size;
    if (i >= s->capacity || s->state(static_cast<std::uint32_t>(i)) != object_state::live) return 0;
    return s->address(static_cast<std::uint32_t>(i)) + s->object_size - p;
  }
  auto it = arena.blocks().find_containing(p);
  if (it->second.state != block_state::allocated) return 0;
  return it->first + it->second.size - p;
}

result<memory_info> caching_allocator::available_memory() {
  auto device = dev_->get_memory_info();
  if (!device) return device.error();
  std::lock_guard lock(mu_);
  const allocator_stats view = current_stats();
  const auto reserved = static_cast<std::size_t>(view.reserved_bytes[pool_all].current);
  const auto allocated = static_cast<std::size_t>(view.allocated_bytes[pool_all].current);
  const std::size_t cached = reserved > allocated ? reserved - allocated : 0;
  const std::size_t within_limit = pages_.limit() > allocated ? pages_.limit() - allocated : 0;
  return memory_info{device->total, std::min(device->free + cached, within_limit)};
}

std::size_t caching_allocator::backing_bytes(std::size_t bytes) const {
  if (bytes > max_request) return bytes;
  const std::size_t size = bytes <= classes_.slab_limit()
                               ? classes_.slab_bytes(size_classes::class_of(bytes))
                               : size_classes::round(bytes);
  return (size + pages_.granularity() - 1) / pages_.granularity() * pages_.granularity();
}

oom_report caching_allocator::shortage_of(std::size_t bytes, stream_handle stream) {
  oom_report r;
  r.requested = bytes;
  r.stream = reinterpret_cast<std::uintptr_t>(stream.native);
  measure_shortage(r);
  return r;
}

void caching_allocator::measure_shortage(oom_report& r) {
  r.needed = backing_bytes(r.requested);
  r.capacity = total_;
  r.limit = pages_.limit();
  r.memory_fraction = options_.memory_fraction;
  r.device_free_known = false;
  if (auto info = dev_->get_memory_info()) {
    r.device_free = info->free;
    r.device_free_known = true;
  }
  r.reserved = pages_.held_pages() * pages_.granularity();
  std::size_t may_create = pages_.limit() > r.reserved ? pages_.limit() - r.reserved : 0;
  if (r.device_free_known) may_create = std::min(may_create, r.device_free);
  r.idle = pages_.idle_pages() * pages_.granularity();
  r.obtainable = r.idle + may_create;
}

void caching_allocator::describe_oom(oom_report& r) {
  measure_shortage(r);
  const allocator_stats view = current_stats();
  r.allocated = static_cast<std::size_t>(view.allocated_bytes[pool_all].current);
  r.reserved_unallocated = r.reserved > r.allocated ? r.reserved - r.allocated : 0;

  r.largest_free_range = 0;
  std::vector<oom_report::live_block> live;
  for (std::size_t k = 0; k < streams_.arenas().size(); ++k) {
    stream_arena& a = *streams_.arenas()[k];
    const auto native = reinterpret_cast<std::uintptr_t>(streams_.owner(k).stream.native);
    for (auto it = a.blocks().begin(); it != a.blocks().end(); ++it) {
      const block_info& b = it->second;
      if (b.state == block_state::free) {
        if (b.mapped) r.largest_free_range = std::max(r.largest_free_range, b.size);
      } else if (b.state == block_state::allocated && a.kind() == pool_kind::large) {
        live.push_back({it->first, b.size, native});
      }
    }
  }
  const std::size_t top = std::min<std::size_t>(live.size(), 10);
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(top), live.end(),
                    [](const auto& x, const auto& y) { return x.size > y.size; });
  live.resize(top);
  r.largest_live = std::move(live);

  r.pending_bytes = 0;
  r.pending_on_stream = 0;
  r.pending_stream = 0;
  std::map<std::uintptr_t, std::size_t> pending_by_stream;
  const auto add_pending = [&](const pending_free& p) {
    std::size_t size = 0;
    if (p.arena->kind() == pool_kind::small) {
      size = p.arena->slab_of(p.addr)->object_size;
    } else if (auto it = p.arena->blocks().find_in_use(p.addr); it != p.arena->blocks().end()) {
      size = it->second.size;
    }
    r.pending_bytes += size;
    pending_by_stream[reinterpret_cast<std::uintptr_t>(p.owner->stream.native)] += size;
  };
  frees_.for_each(add_pending);
  for (const auto& [native, size] : pending_by_stream) {
    if (size > r.pending_on_stream) {
      r.pending_on_stream = size;
      r.pending_stream = native;
    }
  }
  r.decide();
}

}  // namespace strata
