// libFuzzer target: the STRATA_CONF parser and the sim device-spec parser,
// on arbitrary text. The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim_config.hpp"
#include "strata/conf_text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    (void)strata::conf_text::parse(text);
  } else {
    (void)strata::parse_sim_config(text);
  }
  return 0;
}
