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
#include <stdexcept>
#include <string>
#include <string_view>

#include "strata/allocator_options.hpp"
#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"

namespace strata {

class caching_allocator;

/// The exception the C++ API throws: the message plus the code.
class STRATA_API error : public std::runtime_error {
 public:
  explicit error(const status& s) : std::runtime_error(s.to_string()), code_(s.code()) {}
  [[nodiscard]] errc code() const noexcept { return code_; }

 private:
  errc code_;
};

/// Counters by their torch.cuda.memory_stats() names.
using stat_map = std::map<std::string, std::int64_t>;

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

  /// Device-wide allocation (see strata.h); 0 bytes gives nullptr.
  void* malloc(std::size_t bytes);
  /// Device-wide free; nullptr is a no-op. Throws for foreign/double frees.
  void free(void* ptr);
  /// Stream-ordered allocation on a native stream handle (nullptr: default).
  void* malloc_async(std::size_t bytes, void* stream);
  void free_async(void* ptr, void* stream);
  void record_stream(void* ptr, void* stream);
  void empty_cache();
  void trim(std::size_t keep_bytes);
  void set_memory_fraction(double fraction);
  [[nodiscard]] stat_map stats() const;
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
  /// The device's total memory and what an allocation could get now (its
  /// free memory plus this allocator's cached bytes, within the limit), as
  /// cudaMemGetInfo reports under the preload shim. Throws `error`.
  [[nodiscard]] memory_info available_memory() const;
  /// Registers a handler asked to free `bytes` of device memory when a
  /// request would fail; it returns the bytes it freed, runs on the failing
  /// thread without any allocator lock held, and may free through this
  /// allocator. A handler that throws counts as freeing nothing. Returns an
  /// id for remove_pressure_handler.
  std::uint64_t add_pressure_handler(std::function<std::size_t(std::size_t bytes)> handler);
  /// Throws `error` (invalid_argument) for an unknown id.
  void remove_pressure_handler(std::uint64_t id);

 private:
  [[nodiscard]] caching_allocator& impl() const;
  std::unique_ptr<caching_allocator> impl_;
};

}  // namespace strata
