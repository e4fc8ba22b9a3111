#include "device_allocators.hpp"

#include <pthread.h>

#include <cstdlib>
#include <fstream>

namespace strata::integration {

namespace {

// The process's one report writer (the integrations each have one
// device_allocators, living until exit).
device_allocators* reporting = nullptr;

void report_at_exit() {
  if (reporting != nullptr) reporting->write_report();
}

// Every device_allocators of the process (the shim's and the plugin's), for
// the fork handler, which takes no argument.
constexpr std::size_t max_instances = 4;
std::array<std::atomic<device_allocators*>, max_instances> instances{};

void after_fork_in_child() {
  for (auto& i : instances) {
    if (device_allocators* d = i.load(std::memory_order_acquire)) d->forked_child();
  }
}

}  // namespace

device_allocators::device_allocators(const char* who) : who_(who) {
  static const int registered = pthread_atfork(nullptr, nullptr, after_fork_in_child);
  (void)registered;
  for (auto& i : instances) {
    device_allocators* none = nullptr;
    if (i.compare_exchange_strong(none, this, std::memory_order_acq_rel)) return;
  }
}

device_allocators::~device_allocators() {
  for (auto& i : instances) {
    device_allocators* self = this;
    i.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  }
}

void device_allocators::forked_child() noexcept {
  forked_.store(true, std::memory_order_release);
  off_.store(true, std::memory_order_release);
  // The parent's allocators stay in memory, unreachable: their streams'
  // threads do not exist here, and destroying them would wait for those.
  for (auto& slot : allocators_) slot.store(nullptr, std::memory_order_release);
}

std::string stats_json(const stat_map& stats) {
  std::string out = "{";
  for (const auto& [name, value] : stats) {
    if (out.size() > 1) out += ",";
    out += "\"" + name + "\":" + std::to_string(value);
  }
  return out + "}";
}

allocator* device_allocators::owner_of(const void* ptr) {
  for (auto& slot : allocators_) {
    allocator* a = slot.load(std::memory_order_acquire);
    if (a != nullptr && a->owns(ptr)) return a;
  }
  return nullptr;
}

void device_allocators::turn_off(const std::string& why) {
  if (!off_.exchange(true, std::memory_order_acq_rel)) {
    std::fprintf(stderr, "%s: Strata is off, CUDA allocations go to CUDA: %s\n", who_, why.c_str());
  }
}

allocator* device_allocators::create(int index) {
  if (off_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mu_);
  auto& slot = allocators_[static_cast<std::size_t>(index)];
  if (allocator* a = slot.load(std::memory_order_acquire)) return a;
  if (!configured_) {
    auto conf = conf_text::from_env();
    if (!conf) {
      turn_off(conf.error().message());
      return nullptr;
    }
    auto parsed = allocator_options_from(*conf);
    auto own = integration_options_from(*conf);
    if (!parsed || !own) {
      turn_off(parsed ? own.error().message() : parsed.error().message());
      return nullptr;
    }
    options_ = *parsed;
    integration_ = *own;
    if (options_.device.rfind("cuda:", 0) == 0) {
      turn_off("STRATA_CONF device '" + options_.device +
               "': integrations follow the current device; use device:cuda");
      return nullptr;
    }
    configured_ = true;
  }
  allocator_options o = options_;
  if (o.device == "auto" || o.device == "cuda") o.device = "cuda:" + std::to_string(index);
  try {
    auto* a = new allocator(o);  // NOLINT(cppcoreguidelines-owning-memory): lives until exit
    slot.store(a, std::memory_order_release);
    if (reporting == nullptr && !integration_.report_on_exit.empty()) {
      reporting = this;
      std::atexit(report_at_exit);
    }
    return a;
  } catch (const error& e) {
    turn_off(std::string("device ") + std::to_string(index) + ": " + e.what());
    return nullptr;
  }
}

void device_allocators::write_report() {
  if (forked_.load(std::memory_order_acquire)) return;  // the parent reports
  std::string path;
  {
    std::lock_guard lock(mu_);
    path = integration_.report_on_exit;
  }
  if (path.empty()) return;
  if (path.ends_with(".pickle")) {
    write_snapshots(path);
    return;
  }
  std::ofstream out(path);
  if (!out) {
    std::fprintf(stderr, "%s: cannot write the exit report to %s\n", who_, path.c_str());
    return;
  }
  out << "Strata exit report (" << who_ << ")\n";
  for_each([&](int index, allocator& a) {
    out << "\n== device " << index << " ==\n\nstats (JSON):\n";
    out << stats_json(a.stats()) << "\n\n"
        << a.memory_summary() << "\nlast OOM report (JSON):\n"
        << a.last_oom_report() << "\n";
  });
  if (!out.flush()) {
    std::fprintf(stderr, "%s: writing the exit report to %s failed\n", who_, path.c_str());
  }
}

// A PyTorch memory snapshot per device: device 0's at `path`, device N's at
// `path` with ".deviceN" before ".pickle".
void device_allocators::write_snapshots(const std::string& path) {
  for_each([&](int index, allocator& a) {
    std::string file = path;
    if (index > 0) file.insert(file.size() - 7, ".device" + std::to_string(index));
    std::ofstream out(file, std::ios::binary);
    out << a.snapshot_pickle();
    if (!out.flush()) {
      std::fprintf(stderr, "%s: cannot write the exit snapshot to %s\n", who_, file.c_str());
    }
  });
}

}  // namespace strata::integration
