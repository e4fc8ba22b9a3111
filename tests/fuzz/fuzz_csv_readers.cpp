// libFuzzer target: both CSV readers (RMM logs, buffer lifetimes), the
// Strata trace JSON reader, the torch.profiler trace reader and the xz
// decoder, on arbitrary bytes. The first byte picks the reader so one
// corpus grows inputs for all five.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "replay/alloc_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      (void)strata::replay::read_rmm_csv(text, "fuzz.csv");
      break;
    case 1:
      (void)strata::replay::read_lifetime_csv(text, "fuzz.csv");
      break;
    case 2:
      (void)strata::replay::read_strata_trace_json(text, "fuzz.json");
      break;
    case 3:
      (void)strata::replay::read_profiler_trace(text, "fuzz.json", 0);
      break;
    default:
      (void)strata::replay::decompress_xz(text, "fuzz.xz");
      break;
  }
  return 0;
}
