// What nvme_store.cpp and nvme_extents.cpp share: the extent trailer's
// layout and the store's error texts.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "strata/error.hpp"

namespace strata::nvme {

inline constexpr char trailer_magic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'X', '1'};

// The trailer block of extent `id`: magic, id, bytes, crc32c, zeros.
inline void write_trailer(unsigned char* t, std::size_t block, std::uint64_t id,
                          std::uint64_t bytes, std::uint32_t crc) {
  std::memset(t, 0, block);
  std::memcpy(t, trailer_magic, sizeof trailer_magic);
  const std::uint64_t fields[2] = {id, bytes};
  std::memcpy(t + 8, fields, sizeof fields);
  std::memcpy(t + 24, &crc, sizeof crc);
}

// One block-aligned block inside `storage` (2 blocks long).
inline unsigned char* aligned_block(std::vector<unsigned char>& storage, std::size_t block) {
  const auto at = reinterpret_cast<std::uintptr_t>(storage.data());
  return storage.data() + (block - at % block) % block;
}

inline std::string why(int error) {
  return std::system_category().message(error);
}

inline status invalid(std::string message) {
  return {errc::invalid_argument, "nvme store: " + std::move(message)};
}

}  // namespace strata::nvme
