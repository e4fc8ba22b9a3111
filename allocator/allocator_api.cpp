// The C++ API (strata.hpp) over caching_allocator.
#include "allocator_access.hpp"
#include "caching_allocator.hpp"
#include "strata/strata.hpp"

namespace strata {

allocator::allocator(const allocator_options& options)
    : impl_(value_or_throw(caching_allocator::create(options))) {}

allocator allocator::from_conf(std::string_view conf) {
  return allocator(value_or_throw(parse_allocator_conf(conf)));
}

allocator allocator::from_env() {
  return allocator(value_or_throw(allocator_options_from_env()));
}

allocator::allocator(allocator&&) noexcept = default;
allocator& allocator::operator=(allocator&&) noexcept = default;
allocator::~allocator() = default;

allocator allocator_access::wrap(std::unique_ptr<caching_allocator> impl) {
  allocator a;
  a.impl_ = std::move(impl);
  return a;
}

caching_allocator* allocator_access::impl(allocator& a) noexcept {
  return a.impl_.get();
}

void allocator::moved_from() {
  throw error({errc::invalid_argument, "allocator was moved from"});
}

void* allocator::malloc(std::size_t bytes) {
  return value_or_throw(impl().malloc(bytes));
}
void allocator::free(void* ptr) {
  throw_if_error(impl().free(ptr));
}
void* allocator::malloc_async(std::size_t bytes, void* stream) {
  return value_or_throw(impl().malloc_async(bytes, stream));
}
void allocator::free_async(void* ptr, void* stream) {
  throw_if_error(impl().free_async(ptr, stream));
}
void allocator::record_stream(void* ptr, void* stream) {
  throw_if_error(impl().record_stream(ptr, stream));
}
void allocator::empty_cache() {
  throw_if_error(impl().empty_cache());
}
void allocator::trim(std::size_t keep_bytes) {
  throw_if_error(impl().trim(keep_bytes));
}
void allocator::set_memory_fraction(double fraction) {
  throw_if_error(impl().set_memory_fraction(fraction));
}
stat_map allocator::stats() const {
  return impl().stats_map();
}
allocator_stats allocator::counters() const {
  return impl().stats();
}
std::vector<arena_pages> allocator::page_map() const {
  return impl().page_map();
}
device& allocator::dev() const {
  return impl().dev();
}
void allocator::reset_peak_stats() {
  impl().reset_peak_stats();
}
std::string allocator::memory_summary() const {
  return impl().memory_summary();
}
std::string allocator::snapshot_json() const {
  return impl().snapshot_json();
}
std::string allocator::snapshot_pickle() const {
  return impl().snapshot_pickle();
}
std::string allocator::trace_json() const {
  return impl().trace_json();
}
std::string allocator::last_oom_report() const {
  return impl().last_oom_report();
}
bool allocator::owns(const void* ptr) const {
  return impl().owns(ptr);
}

std::optional<std::size_t> allocator::live_bytes_from(const void* ptr) const {
  return impl().live_bytes_from(ptr);
}
memory_info allocator::available_memory() const {
  return value_or_throw(impl().available_memory());
}
std::uint64_t allocator::add_pressure_handler(std::function<std::size_t(std::size_t)> handler) {
  return impl().add_pressure_handler(std::move(handler));
}
void allocator::remove_pressure_handler(std::uint64_t id) {
  throw_if_error(impl().remove_pressure_handler(id));
}
std::uint64_t allocator::add_stats_source(std::string section, std::function<stat_map()> read) {
  return impl().add_stats_source(std::move(section), std::move(read));
}
void allocator::remove_stats_source(std::uint64_t id) {
  throw_if_error(impl().remove_stats_source(id));
}

}  // namespace strata
