// Strata's C++ API: an RAII allocator handle that throws `strata::error`.
//
// Thread safety: every member of `allocator` may be called concurrently from
// any thread, except construction, destruction and moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/allocator_options.hpp"
#include "strata/allocator_stats.hpp"
#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"

namespace strata {

class caching_allocator;
struct allocator_access;

/// The exception the C++ API throws: what() is "code_name: message".
class STRATA_API error : public std::runtime_error {
 public:
  explicit error(const status& s)
      : std::runtime_error(s.to_string()), code_(s.code()), message_(s.message()) {}
  [[nodiscard]] errc code() const noexcept { return code_; }
  /// The message without the code's name.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  /// The error as a status (code and message).
  [[nodiscard]] status to_status() const { return {code_, message_}; }

 private:
  errc code_;
  std::string message_;
};

/// Throws error(s) when `s` is an error; does nothing otherwise. For code
/// that reports failures by exception over calls that return a status.
inline void throw_if_error(const status& s) {
  if (!s) throw error(s);
}

/// The value of `r`, moved out; throws error(r.error()) when it is an error.
template <class T>
T value_or_throw(result<T> r) {
  if (!r) throw error(r.error());
  return std::move(*r);
}

/// Counters by their torch.cuda.memory_stats() names.
using stat_map = std::map<std::string, std::int64_t>;

/// Which pages are mapped in one arena (allocator::page_map): one entry per
/// page up to its last mapped page: 0 unmapped, 1 mapped and holding no
/// live block, 2 mapped under a live block (or a slab).
struct arena_pages {
  std::uintptr_t stream = 0;  ///< the arena's native stream handle
  bool small = false;         ///< the small (size-class) arena of that stream
  std::vector<std::uint8_t> pages;
};

class STRATA_API allocator {
 public:
  /// Opens `options.device` and creates the allocator. Throws `error`.
  explicit allocator(const allocator_options& options);
  /// Configured from STRATA_CONF syntax (docs/configuration.md).
  static allocator from_conf(std::string_view conf);
  /// Configured from the STRATA_CONF environment variable.
  static allocator from_env();
  allocator(allocator&&) noexcept;
  allocator& operator=(allocator&&) noexcept;
  allocator(const allocator&) = delete;
  allocator& operator=(const allocator&) = delete;
  /// Waits for the device and returns all memory to it.
  ~allocator();

  /// Device-wide allocation (see strata.h); 0 bytes gives nullptr. Throws
  /// `error` (out_of_memory with the report's summary; last_oom_report()
  /// has the whole report).
  void* malloc(std::size_t bytes);
  /// Device-wide free; nullptr is a no-op. Throws for foreign/double frees.
  void free(void* ptr);
  /// Stream-ordered allocation on a native stream handle (nullptr: default).
  void* malloc_async(std::size_t bytes, void* stream);
  void free_async(void* ptr, void* stream);

  /// malloc, free, malloc_async and free_async without exceptions: errors
  /// come back as values, with the same codes and messages. For callers to
  /// whom out_of_memory is an outcome, not an exception (the residency
  /// manager spills and retries; replay counts it).
  [[nodiscard]] result<void*> try_malloc(std::size_t bytes);
  status try_free(void* ptr);
  [[nodiscard]] result<void*> try_malloc_async(std::size_t bytes, void* stream);
  status try_free_async(void* ptr, void* stream);

  /// The free of `ptr` also waits for work queued on `stream` up to the
  /// free (torch's record_stream).
  void record_stream(void* ptr, void* stream);
  /// Returns every page not backing a live block to the device.
  void empty_cache();
  /// Waits for pending frees, then returns idle pages until at most
  /// `keep_bytes` of them remain cached.
  void trim(std::size_t keep_bytes);
  /// Limits the bytes held to `fraction` (0, 1] of the device's memory.
  void set_memory_fraction(double fraction);
  /// The counters by their torch.cuda.memory_stats() names, then those of
  /// the stats sources (add_stats_source) as "<section>.<name>".
  [[nodiscard]] stat_map stats() const;
  /// The same counters as a struct (strata/allocator_stats.hpp): no map, no
  /// strings, cheap enough to read after every call.
  [[nodiscard]] allocator_stats counters() const;
  /// Which pages are mapped, per arena (see arena_pages).
  [[nodiscard]] std::vector<arena_pages> page_map() const;
  void reset_peak_stats();
  [[nodiscard]] std::string memory_summary() const;
  [[nodiscard]] std::string snapshot_json() const;
  /// The snapshot as a pickle in the structure of PyTorch's
  /// torch.cuda.memory._dump_snapshot (bytes; write them to a .pickle file).
  [[nodiscard]] std::string snapshot_pickle() const;
  /// The event trace as JSON (needs trace_buffer > 0 to hold events).
  [[nodiscard]] std::string trace_json() const;
  /// The last OOM's report as JSON ("null" if none).
  [[nodiscard]] std::string last_oom_report() const;
  /// True if `ptr` lies in address space this allocator reserved, whether or
  /// not it is a live block (so a false answer means "someone else's").
  [[nodiscard]] bool owns(const void* ptr) const;
  /// For a pointer into this allocator's address space: the bytes from
  /// `ptr` to the end of the live block holding it, 0 when no live block
  /// holds it (freed, or never handed out). std::nullopt when `ptr` is not
  /// in this allocator's address space (someone else's memory: nothing is
  /// known of its size). Lets a caller check a buffer holds what it is
  /// about to write. Thread safety: any thread; takes the allocator's lock.
  [[nodiscard]] std::optional<std::size_t> live_bytes_from(const void* ptr) const;
  /// The device's total memory and what an allocation could get now (its
  /// free memory plus this allocator's cached bytes, within the limit), as
  /// cudaMemGetInfo reports under the preload shim. Throws `error`.
  [[nodiscard]] memory_info available_memory() const;
  /// Registers a handler asked to free `bytes` of device memory when a
  /// request would fail; it returns the bytes it freed, runs on the failing
  /// thread without any allocator lock held, and may free through this
  /// allocator. A handler that throws counts as freeing nothing. While the
  /// handlers free something and the retry still fails (freed bytes may
  /// share pages with live blocks), they are asked again, each time for at
  /// least twice as much. Returns an id for remove_pressure_handler.
  std::uint64_t add_pressure_handler(std::function<std::size_t(std::size_t bytes)> handler);
  /// Throws `error` (invalid_argument) for an unknown id.
  void remove_pressure_handler(std::uint64_t id);
  /// Registers counters of a layer above the allocator (the residency
  /// manager, the prefetcher): `read()`'s counters appear in stats() as
  /// "<section>.<name>" and as a section of memory_summary(). `read` runs
  /// on the thread asking for the stats, without any allocator lock held.
  /// Returns an id for remove_stats_source.
  std::uint64_t add_stats_source(std::string section, std::function<stat_map()> read);
  /// Throws `error` (invalid_argument) for an unknown id. A read already
  /// under way finishes.
  void remove_stats_source(std::uint64_t id);

  /// The device this allocator allocates on, for the layers above (streams,
  /// events, copies, pinned host memory); valid as long as the allocator.
  [[nodiscard]] device& dev() const;

 private:
  friend struct allocator_access;  // the C API reaches the implementation
  allocator() = default;
  // Inline: the alloc/free fast path pays one branch for it.
  [[nodiscard]] caching_allocator& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      moved_from();
    return *impl_;
  }
  [[noreturn]] static void moved_from();
  std::unique_ptr<caching_allocator> impl_;
};

}  // namespace strata
