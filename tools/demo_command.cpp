#include "demo_command.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "strata/device.hpp"
#include "strata/option_table.hpp"

namespace strata {

namespace {

// Prints one step and its outcome; false when it failed.
bool step(const char* what, const status& s) {
  std::printf("  %-58s %s\n", what, s.ok() ? "ok" : s.to_string().c_str());
  return s.ok();
}

template <class T>
bool step(const char* what, const result<T>& r) {
  return step(what, r.error());
}

int fail(const char* why) {
  std::fprintf(stderr, "strata demo: %s\n", why);
  return 1;
}

}  // namespace

int run_demo(const std::string& spec) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto opened = open_device(spec);
  if (!opened) {
    std::fprintf(stderr, "strata demo: cannot open device '%s': %s\n", spec.c_str(),
                 opened.error().to_string().c_str());
    return 1;
  }
  device& dev = **opened;
  const std::size_t g = dev.granularity();
  std::printf("device: %s\n", dev.name().c_str());
  auto info = dev.get_memory_info();
  if (!step("query memory", info)) return 1;
  std::printf("  total %s, free %s, granularity %s\n", format_bytes(info->total).c_str(),
              format_bytes(info->free).c_str(), format_bytes(g).c_str());

  std::printf("virtual memory: reserve, create pages, map twice (aliasing)\n");
  auto base = dev.reserve(8 * g);
  if (!step("reserve 8 pages of address space", base)) return 1;
  auto run = dev.create_pages(2 * g);
  if (!step("create a 2-page physical run", run)) return 1;
  if (!step("map it at the start of the range", dev.map(*base, 2 * g, *run))) return 1;
  if (!step("map it again 4 pages further (an alias)", dev.map(*base + 4 * g, 2 * g, *run))) {
    return 1;
  }
  if (!step("set read-write access on both mappings",
            dev.set_access(*base, 2 * g).ok() ? dev.set_access(*base + 4 * g, 2 * g)
                                              : status{errc::device_error, "set_access failed"})) {
    return 1;
  }
  auto after = dev.get_memory_info();
  if (!step("query memory again", after)) return 1;
  std::printf("  %s in use (the run counts once, though mapped twice)\n",
              format_bytes(after->total - after->free).c_str());

  std::printf("streams: copy in on stream A, stream B waits on A's event, copy out on B\n");
  auto a = dev.create_stream();
  auto b = dev.create_stream();
  auto ev = dev.create_event();
  if (!step("create streams A and B and an event", a.ok() && b.ok() ? ev.error() : a.error())) {
    return 1;
  }
  std::vector<unsigned char> in(2 * g);
  std::vector<unsigned char> out(2 * g, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  auto* first = reinterpret_cast<void*>(*base);
  auto* alias = reinterpret_cast<void*>(*base + 4 * g);
  if (!step("copy 2 pages host -> device on A",
            dev.copy_async(first, in.data(), in.size(), copy_direction::host_to_device, *a))) {
    return 1;
  }
  if (!step("record the event on A", dev.record_event(*ev, *a))) return 1;
  if (!step("make B wait on the event", dev.stream_wait_event(*b, *ev))) return 1;
  if (!step("copy 2 pages device (alias) -> host on B",
            dev.copy_async(out.data(), alias, out.size(), copy_direction::device_to_host, *b))) {
    return 1;
  }
  if (!step("synchronize B", dev.synchronize_stream(*b))) return 1;
  const bool same = std::memcmp(in.data(), out.data(), in.size()) == 0;
  std::printf("  bytes read through the alias match what was written: %s\n", same ? "yes" : "NO");
  if (!same) return fail("the alias showed different bytes");

  std::printf("errors are reported, not fatal:\n");
  const auto refused = dev.unmap(*base, g);
  std::printf("  unmap half of a mapping -> %s\n", refused.to_string().c_str());
  auto too_big = dev.create_pages(2 * info->total);
  std::printf("  create more pages than capacity -> %s\n", too_big.error().to_string().c_str());
  if (refused.ok() || too_big.ok()) return fail("a bad request was accepted");

  std::printf("clean up\n");
  bool ok = step("unmap both mappings", dev.unmap(*base, 2 * g).ok()
                                            ? dev.unmap(*base + 4 * g, 2 * g)
                                            : status{errc::device_error, "unmap failed"});
  ok = step("release the pages", dev.release_pages(*run)) && ok;
  ok = step("free the reservation", dev.free_reservation(*base, 8 * g)) && ok;
  ok = step("destroy event and streams", dev.destroy_event(*ev).ok() && dev.destroy_stream(*a).ok()
                                             ? dev.destroy_stream(*b)
                                             : status{errc::device_error, "destroy failed"}) &&
       ok;
  auto last = dev.get_memory_info();
  if (!step("query memory at the end", last)) return 1;
  std::printf("  free %s of %s\n", format_bytes(last->free).c_str(),
              format_bytes(last->total).c_str());
  const double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  std::printf("demo %s in %.1f ms\n", ok ? "finished" : "FAILED", ms);
  return ok ? 0 : 1;
}  // NOLINT(clang-analyzer-cplusplus.NewDeleteLeaks): false positive on result<unique_ptr<device>>

}  // namespace strata
