// libFuzzer target: the pickle reader and the PyTorch snapshot reader over
// it, on arbitrary bytes. Any crash, sanitizer report, leak or hang fails.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "replay/alloc_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)strata::replay::read_pytorch_snapshot(bytes, "fuzz.pickle", 0);
  return 0;
}
