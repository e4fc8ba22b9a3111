#include "crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata {

namespace {

constexpr std::uint32_t polynomial = 0x82f63b78;  // reflected Castagnoli

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ polynomial : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<std::uint32_t, 256> table = make_table();

std::uint32_t by_table(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
[[gnu::target("sse4.2")]] std::uint32_t by_instruction(std::uint32_t crc, const unsigned char* p,
                                                       std::size_t n) noexcept {
  std::uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool has_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2") != 0;
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (has_sse42()) return ~by_instruction(crc, p, bytes);
#endif
  return ~by_table(crc, p, bytes);
}

}  // namespace strata
