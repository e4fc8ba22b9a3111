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

// Polynomials over GF(2) modulo the CRC polynomial, in the CRC's reflected
// bit order (x^0 is the top bit). Shifting a CRC register over n zero bytes
// multiplies it by x^(8n).
constexpr std::uint32_t x_to_the_0 = 1U << 31;

constexpr std::uint32_t multiply(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (std::uint32_t bit = x_to_the_0; bit != 0; bit >>= 1) {
    if ((a & bit) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ polynomial : b >> 1;  // b * x
  }
  return product;
}

// x^(8 * bytes): the factor that moves a register over `bytes` zero bytes.
constexpr std::uint32_t zero_bytes_factor(std::size_t bytes) noexcept {
  std::uint32_t result = x_to_the_0;
  std::uint32_t power = multiply(1U << 30, x_to_the_0);        // x^1
  for (int k = 0; k < 3; ++k) power = multiply(power, power);  // x^8
  for (; bytes != 0; bytes >>= 1) {
    if ((bytes & 1) != 0) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

#if defined(__x86_64__)
[[gnu::target("sse4.2")]] std::uint64_t words(std::uint64_t c, const unsigned char* p,
                                              std::size_t n) noexcept {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  return c;
}

// The crc32 instruction takes 3 cycles and can start one a cycle, so one
// chain of it runs at a third of its rate: three chains over three
// adjacent stripes, combined by moving the first two over the stripes
// after them (a CRC is linear: crc(A B) = crc(A) * x^(8|B|) + crc0(B)).
constexpr std::size_t stripe = 8192;
constexpr std::uint32_t over_one_stripe = zero_bytes_factor(stripe);
constexpr std::uint32_t over_two_stripes = zero_bytes_factor(2 * stripe);

[[gnu::target("sse4.2")]] std::uint32_t by_instruction(std::uint32_t crc, const unsigned char* p,
                                                       std::size_t n) noexcept {
  std::uint64_t c = crc;
  for (; n >= 3 * stripe; n -= 3 * stripe, p += 3 * stripe) {
    std::uint64_t c1 = 0;
    std::uint64_t c2 = 0;
    for (std::size_t i = 0; i < stripe; i += 8) {
      std::uint64_t w0 = 0;
      std::uint64_t w1 = 0;
      std::uint64_t w2 = 0;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + stripe + i, 8);
      std::memcpy(&w2, p + 2 * stripe + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = multiply(over_two_stripes, static_cast<std::uint32_t>(c)) ^
        multiply(over_one_stripe, static_cast<std::uint32_t>(c1)) ^ static_cast<std::uint32_t>(c2);
  }
  c = words(c, p, n);
  p += n & ~std::size_t{7};
  auto c32 = static_cast<std::uint32_t>(c);
  for (n &= 7; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
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
