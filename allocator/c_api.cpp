// The C API (strata.h) over caching_allocator; handles and errors as
// c_handle.hpp describes.
#include <cstdlib>
#include <cstring>
#include <string>

#include "allocator_access.hpp"
#include "c_handle.hpp"
#include "strata/c_extension.hpp"

namespace strata::c_api {

namespace {

thread_local std::string last_error;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

}  // namespace

strata_status fail(const status& s) {
  last_error = s.message();
  return static_cast<strata_status>(s.code());
}

strata_status fail(errc code, const char* message) {
  last_error = message;
  return static_cast<strata_status>(code);
}

strata_status null_output() {
  return fail(errc::invalid_argument, "null output pointer");
}

strata_status to_c(const status& s) {
  return s.ok() ? STRATA_OK : fail(s);
}

strata_status copy_out(const std::string& text, char** out) {
  if (out == nullptr) return null_output();
  auto* buf = static_cast<char*>(std::malloc(text.size() + 1));  // NOLINT: C ownership
  if (buf == nullptr) return fail(errc::out_of_memory, "host out of memory");
  std::memcpy(buf, text.c_str(), text.size() + 1);
  *out = buf;
  return STRATA_OK;
}

strata_status copy_out(const stat_map& counters, char** out) {
  std::string json = "{";
  for (const auto& [name, value] : counters) {
    json += json.size() > 1 ? ",\"" : "\"";
    json += name;
    json += "\":";
    json += std::to_string(value);
  }
  return copy_out(json + "}", out);
}

const char* last_error_message() {
  return last_error.c_str();
}

allocator* borrow(strata_allocator* handle) {
  return borrow_from(handle);
}

void give_back(strata_allocator* handle) {
  give_back_to(handle);
}

strata_allocator* handle_over(allocator& a) {
  auto* slot = new_slot<strata_allocator>();
  slot->owned = false;
  slot->impl.store(&a, std::memory_order_release);
  return slot;
}

result<conf_text> conf_of(const char* conf) {
  return conf != nullptr ? conf_text::parse(conf) : conf_text::from_env();
}

}  // namespace strata::c_api

namespace {

using strata::c_api::copy_out;
using strata::c_api::fail;
using strata::c_api::to_c;

strata::caching_allocator* get(strata_allocator* a) {
  strata::allocator* cpp = a == nullptr ? nullptr : a->impl.load(std::memory_order_acquire);
  return cpp == nullptr ? nullptr : strata::allocator_access::impl(*cpp);
}

strata_status no_allocator(strata_allocator* a) {
  return fail(strata::errc::invalid_argument,
              a == nullptr ? "null allocator handle" : "the allocator was destroyed");
}

}  // namespace

extern "C" {

const char* strata_error_string(strata_status code) {
  return strata::errc_name(static_cast<strata::errc>(code));
}

const char* strata_last_error_message(void) {
  return strata::c_api::last_error_message();
}

strata_status strata_allocator_create(const char* conf, strata_allocator** out) {
  if (out == nullptr) return strata::c_api::null_output();
  auto options = strata::c_api::section_of(conf, strata::allocator_options_from);
  if (!options) return fail(options.error());
  auto made = strata::caching_allocator::create(*options);
  if (!made) return fail(made.error());
  *out = strata::c_api::new_handle<strata_allocator>(
      std::make_unique<strata::allocator>(strata::allocator_access::wrap(std::move(*made))));
  return STRATA_OK;
}

strata_status strata_allocator_destroy(strata_allocator* a) {
  if (const unsigned users = strata::c_api::users_of(a); users != 0) {
    return fail(strata::status{
        strata::errc::invalid_argument,
        std::to_string(users) +
            " handle(s) made over this allocator still use it (residency managers, "
            "communicators, kernels, gradient buckets or prefetchers): destroy them first"});
  }
  auto object = strata::c_api::take_object(a);
  if (object == nullptr) return no_allocator(a);
  // A handle_over() handle ends here; its allocator stays with its owner.
  if (!a->owned) (void)object.release();  // NOLINT(bugprone-unused-return-value)
  return STRATA_OK;
}

strata_status strata_malloc(strata_allocator* a, size_t size, void** out) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  if (out == nullptr) return strata::c_api::null_output();
  auto p = impl->malloc(size);
  if (!p) return fail(p.error());
  *out = *p;
  return STRATA_OK;
}

strata_status strata_free(strata_allocator* a, void* ptr) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->free(ptr)) : no_allocator(a);
}

strata_status strata_malloc_async(strata_allocator* a, size_t size, void* stream, void** out) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  if (out == nullptr) return strata::c_api::null_output();
  auto p = impl->malloc_async(size, stream);
  if (!p) return fail(p.error());
  *out = *p;
  return STRATA_OK;
}

strata_status strata_free_async(strata_allocator* a, void* ptr, void* stream) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->free_async(ptr, stream)) : no_allocator(a);
}

strata_status strata_record_stream(strata_allocator* a, void* ptr, void* stream) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->record_stream(ptr, stream)) : no_allocator(a);
}

strata_status strata_stream_synchronize(strata_allocator* a, void* stream) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  return to_c(impl->dev().synchronize_stream(strata::stream_handle{stream}));
}

strata_status strata_empty_cache(strata_allocator* a) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->empty_cache()) : no_allocator(a);
}

strata_status strata_trim(strata_allocator* a, size_t keep_bytes) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->trim(keep_bytes)) : no_allocator(a);
}

strata_status strata_set_memory_fraction(strata_allocator* a, double fraction) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->set_memory_fraction(fraction)) : no_allocator(a);
}

strata_status strata_get_stat(strata_allocator* a, const char* name, int64_t* value) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  if (name == nullptr || value == nullptr) {
    return fail(strata::errc::invalid_argument, "null stat name or output pointer");
  }
  const auto all = impl->stats_map();
  auto it = all.find(name);
  if (it == all.end()) {
    return fail(strata::errc::invalid_argument,
                (std::string("unknown stat '") + name + "'").c_str());
  }
  *value = it->second;
  return STRATA_OK;
}

strata_status strata_reset_peak_stats(strata_allocator* a) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  impl->reset_peak_stats();
  return STRATA_OK;
}

strata_status strata_stats_json(strata_allocator* a, char** out) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  return copy_out(impl->stats_map(), out);
}

strata_status strata_memory_summary(strata_allocator* a, char** out) {
  auto* impl = get(a);
  return impl != nullptr ? copy_out(impl->memory_summary(), out) : no_allocator(a);
}

strata_status strata_snapshot_json(strata_allocator* a, char** out) {
  auto* impl = get(a);
  return impl != nullptr ? copy_out(impl->snapshot_json(), out) : no_allocator(a);
}

strata_status strata_trace_json(strata_allocator* a, char** out) {
  auto* impl = get(a);
  return impl != nullptr ? copy_out(impl->trace_json(), out) : no_allocator(a);
}

strata_status strata_last_oom_report(strata_allocator* a, char** out) {
  auto* impl = get(a);
  return impl != nullptr ? copy_out(impl->last_oom_report(), out) : no_allocator(a);
}

strata_status strata_snapshot_pickle(strata_allocator* a, char** out, size_t* size) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  if (size == nullptr) return fail(strata::errc::invalid_argument, "null size pointer");
  const std::string bytes = impl->snapshot_pickle();
  const strata_status s = copy_out(bytes, out);
  if (s == STRATA_OK) *size = bytes.size();
  return s;
}

strata_status strata_add_pressure_handler(strata_allocator* a, strata_pressure_fn fn, void* context,
                                          uint64_t* id) {
  auto* impl = get(a);
  if (impl == nullptr) return no_allocator(a);
  if (fn == nullptr || id == nullptr) {
    return fail(strata::errc::invalid_argument, "null handler or id pointer");
  }
  *id = impl->add_pressure_handler([fn, context](std::size_t bytes) { return fn(context, bytes); });
  return STRATA_OK;
}

strata_status strata_remove_pressure_handler(strata_allocator* a, uint64_t id) {
  auto* impl = get(a);
  return impl != nullptr ? to_c(impl->remove_pressure_handler(id)) : no_allocator(a);
}

void strata_string_free(char* s) {
  std::free(s);
}  // NOLINT(cppcoreguidelines-no-malloc)

}  // extern "C"
