// A program built against an installed Strata: opens a sim device, maps a
// page, and copies through it.
#include <strata/device.hpp>
#include <strata/version.hpp>

#include <cstdio>
#include <cstring>

int main() {
  auto opened = strata::open_device("sim:capacity=64MiB");
  if (!opened) {
    std::fprintf(stderr, "open_device: %s\n", opened.error().to_string().c_str());
    return 1;
  }
  strata::device& dev = **opened;
  const std::size_t g = dev.granularity();
  auto base = dev.reserve(g);
  auto run = dev.create_pages(g);
  if (!base || !run || !dev.map(*base, g, *run) || !dev.set_access(*base, g)) return 2;
  char in[16] = "strata consumer";
  char out[16] = {};
  auto* d = reinterpret_cast<void*>(*base);
  if (!dev.copy_async(d, in, sizeof in, strata::copy_direction::host_to_device, {}) ||
      !dev.copy_async(out, d, sizeof out, strata::copy_direction::device_to_host, {}) ||
      !dev.synchronize_stream({})) {
    return 3;
  }
  if (std::memcmp(in, out, sizeof in) != 0) return 4;
  if (!dev.unmap(*base, g) || !dev.release_pages(*run) || !dev.free_reservation(*base, g)) return 5;
  std::printf("consumer ok: strata %s on %s\n", strata::version(), dev.name().c_str());
  return 0;
}
