// `open_device`: turns a spec string into a device.
#include <string>

#include "sim_config.hpp"
#include "sim_device.hpp"
#include "strata/device.hpp"
#include "strata/option_table.hpp"
#if STRATA_HAVE_CUDA
#include "cuda_device.hpp"
#endif

namespace strata {

namespace {

constexpr std::string_view spec_forms =
    "expected 'sim[:key=value,...]', 'cuda[:N]' or 'auto' (see docs/device.md)";

result<std::unique_ptr<device>> open_sim(std::string_view options) {
  auto config = parse_sim_config(options);
  if (!config) return config.error();
  auto dev = sim_device::create(*config);
  if (!dev) return dev.error();
  return std::unique_ptr<device>(std::move(*dev));
}

result<std::unique_ptr<device>> open_cuda(std::string_view ordinal_text) {
  int ordinal = 0;
  if (!ordinal_text.empty()) {
    auto n = parse_count("cuda device ordinal", ordinal_text);
    if (!n) return n.error();
    if (*n > 1024) {
      return status{errc::invalid_argument,
                    "cuda device ordinal " + std::string(ordinal_text) + " is out of range"};
    }
    ordinal = static_cast<int>(*n);
  }
#if STRATA_HAVE_CUDA
  auto dev = cuda_device::open(ordinal);
  if (!dev) return dev.error();
  return std::unique_ptr<device>(std::move(*dev));
#else
  (void)ordinal;
  return status{errc::not_supported,
                "this Strata was built without the CUDA toolkit (STRATA_WITH_CUDA=OFF or no "
                "toolkit found), so the cuda device is unavailable; use 'sim:...' or rebuild "
                "with the toolkit"};
#endif
}

}  // namespace

result<std::unique_ptr<device>> open_device(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  if (kind == "sim") return open_sim(rest);
  if (kind == "cuda") return open_cuda(rest);
  if (kind == "auto" && colon == std::string_view::npos) {
    auto dev = open_cuda("");
    if (dev) return dev;
    return status{dev.code(), dev.error().message() +
                                  "; no CUDA device is usable, so 'auto' has nothing to open. "
                                  "To run on the simulated GPU, ask for it: --device "
                                  "'sim:capacity=80GiB'"};
  }
  return status{errc::invalid_argument,
                "unknown device spec '" + std::string(spec) + "': " + std::string(spec_forms)};
}

}  // namespace strata
