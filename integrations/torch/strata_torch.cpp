// libstrata_torch.so (strata_torch.h): Strata behind the function pointers
// PyTorch's CUDAPluggableAllocator calls.
#include "strata_torch.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "device_allocators.hpp"
#include "strata/c_extension.hpp"
#include "strata/conf_text.hpp"

namespace {

using strata::integration::device_allocators;
using strata::integration::stats_json;

device_allocators& allocators() {
  static device_allocators all("strata torch");
  return all;
}

thread_local std::string last_error;

void fail(std::string why) {
  last_error = std::move(why);
}

char* copy_out(const std::string& text) {
  auto* out = static_cast<char*>(std::malloc(text.size() + 1));  // NOLINT: freed by the caller
  if (out != nullptr) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

// The allocator of `device`, or null with the reason kept.
strata::allocator* allocator_of(int device) {
  strata::allocator* a = allocators().get(device);
  if (a == nullptr) {
    fail(allocators().on() ? "device " + std::to_string(device) + " is out of range"
                           : "Strata could not start (see the message on stderr)");
  }
  return a;
}

template <class Text>
char* text_of(int device, Text text) {
  strata::allocator* a = allocator_of(device);
  if (a == nullptr) return nullptr;
  try {
    return copy_out(text(*a));
  } catch (const strata::error& e) {
    fail(e.what());
    return nullptr;
  }
}

}  // namespace

namespace {

// strata_torch_malloc's work: the block, or null with the reason kept and,
// for a failed allocation, its code in `code`.
void* allocate(ssize_t size, int device, strata_torch_stream stream, strata::errc& code) {
  code = strata::errc::invalid_argument;
  if (size < 0) {
    fail("strata_torch_malloc: negative size " + std::to_string(size));
    return nullptr;
  }
  strata::allocator* a = allocator_of(device);
  if (a == nullptr) return nullptr;
  try {
    return a->malloc_async(static_cast<std::size_t>(size), stream);
  } catch (const strata::error& e) {
    code = e.code();
    fail(e.what());  // an OOM's report stays in the allocator too
    return nullptr;
  }
}

}  // namespace

void* strata_torch_malloc(ssize_t size, int device, strata_torch_stream stream) {
  strata::errc code{};
  return allocate(size, device, stream, code);
}

void* strata_torch_malloc_or_throw(ssize_t size, int device, strata_torch_stream stream) {
  strata::errc code{};
  void* p = allocate(size, device, stream, code);
  if (p != nullptr || size == 0) return p;
  if (code == strata::errc::out_of_memory) {
    throw std::runtime_error("CUDA out of memory. Strata, device " + std::to_string(device) + ": " +
                             last_error);
  }
  throw std::runtime_error("Strata, device " + std::to_string(device) + ": " + last_error);
}

void strata_torch_free(void* ptr, ssize_t /*size*/, int device, strata_torch_stream stream) {
  if (ptr == nullptr) return;
  strata::allocator* a = allocator_of(device);
  if (a == nullptr) return;
  try {
    a->free_async(ptr, stream);
  } catch (const strata::error& e) {
    fail(e.what());
    std::fprintf(stderr, "strata torch: free of %p on device %d refused: %s\n", ptr, device,
                 e.what());
  }
}

void strata_torch_record_stream(void* ptr, strata_torch_stream stream) {
  strata::allocator* a = allocators().owner_of(ptr);
  if (a == nullptr) {
    fail("strata_torch_record_stream: not a Strata pointer");
    return;
  }
  try {
    a->record_stream(ptr, stream);
  } catch (const strata::error& e) {
    fail(e.what());
  }
}

void strata_torch_empty_cache(void) {
  allocators().for_each([](int, strata::allocator& a) {
    try {
      a.empty_cache();
    } catch (const strata::error& e) {
      fail(e.what());
    }
  });
}

void strata_torch_set_memory_fraction(double fraction, int device) {
  strata::allocator* a = allocator_of(device);
  if (a == nullptr) return;
  try {
    a->set_memory_fraction(fraction);
  } catch (const strata::error& e) {
    fail(e.what());
  }
}

void strata_torch_init(int device_count) {
  if (device_count < 0 || device_count > device_allocators::max_devices) {
    fail("strata_torch_init: " + std::to_string(device_count) + " devices; Strata serves up to " +
         std::to_string(device_allocators::max_devices));
  }
}

char* strata_torch_stats_json(int device) {
  return text_of(device, [](strata::allocator& a) { return stats_json(a.stats()); });
}

char* strata_torch_snapshot_json(int device) {
  return text_of(device, [](strata::allocator& a) { return a.snapshot_json(); });
}

char* strata_torch_trace_json(int device) {
  return text_of(device, [](strata::allocator& a) { return a.trace_json(); });
}

char* strata_torch_last_oom_report(int device) {
  return text_of(device, [](strata::allocator& a) { return a.last_oom_report(); });
}

char* strata_torch_memory_summary(int device) {
  return text_of(device, [](strata::allocator& a) { return a.memory_summary(); });
}

void strata_torch_string_free(char* s) {
  std::free(s);  // NOLINT(cppcoreguidelines-no-malloc): allocated by copy_out
}

strata_allocator* strata_torch_allocator(int device) {
  static std::array<std::atomic<strata_allocator*>, device_allocators::max_devices> handles{};
  static std::mutex mu;
  strata::allocator* a = allocator_of(device);
  if (a == nullptr) return nullptr;
  auto& slot = handles[static_cast<std::size_t>(device)];  // in range: allocator_of checked
  if (strata_allocator* h = slot.load(std::memory_order_acquire)) return h;
  std::lock_guard lock(mu);
  if (strata_allocator* h = slot.load(std::memory_order_acquire)) return h;
  strata_allocator* h = strata::c_api::handle_over(*a);
  slot.store(h, std::memory_order_release);
  return h;
}

int strata_torch_is_allocator_key(const char* key) {
  if (key == nullptr) return 0;
  return strata::allocator_conf_section().has_key(key) ||
                 strata::integration_conf_section().has_key(key)
             ? 1
             : 0;
}

const char* strata_torch_last_error(void) {
  return last_error.c_str();
}
