#include "frame_capture.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>

#include <algorithm>
#include <array>

namespace strata {

namespace {

struct own_range {
  const void* base;
  std::uintptr_t lo = UINTPTR_MAX;
  std::uintptr_t hi = 0;
  bool is_program = false;  // Strata is linked into the program itself
};

// The executable segments of the object loaded at `base`.
int find_own(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  auto* r = static_cast<own_range*>(data);
  if (reinterpret_cast<const void*>(info->dlpi_addr) != r->base) return 0;
  r->is_program = info->dlpi_name == nullptr || info->dlpi_name[0] == '\0';
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD || (p.p_flags & PF_X) == 0) continue;
    r->lo = std::min<std::uintptr_t>(r->lo, info->dlpi_addr + p.p_vaddr);
    r->hi = std::max<std::uintptr_t>(r->hi, info->dlpi_addr + p.p_vaddr + p.p_memsz);
  }
  return 1;
}

}  // namespace

frame_capture::frame_capture(std::size_t frames, std::size_t slots)
    : frames_(slots == 0 ? 0 : std::min(frames, max_frames)), slots_(slots) {
  if (frames_ == 0) return;
  ring_.resize(slots_ * frames_);
  counts_.resize(slots_);
  Dl_info self{};
  if (dladdr(reinterpret_cast<const void*>(&find_own), &self) != 0) {
    own_range r{self.dli_fbase};
    dl_iterate_phdr(find_own, &r);
    if (r.lo < r.hi && !r.is_program) {
      own_lo_ = r.lo;
      own_hi_ = r.hi;
    }
  }
  std::array<void*, 4> warm{};
  (void)backtrace(warm.data(), static_cast<int>(warm.size()));  // loads the unwinder now
}

void frame_capture::capture(std::uint64_t slot) noexcept {
  constexpr std::size_t internal = 24;  // room for Strata's own frames
  std::array<void*, max_frames + internal> raw{};
  const auto n = static_cast<std::size_t>(
      backtrace(raw.data(), static_cast<int>(std::min(raw.size(), frames_ + internal))));
  std::size_t first = std::min<std::size_t>(1, n);  // past capture() itself
  while (first < n && reinterpret_cast<std::uintptr_t>(raw[first]) >= own_lo_ &&
         reinterpret_cast<std::uintptr_t>(raw[first]) < own_hi_) {
    ++first;
  }
  const std::size_t kept = std::min(frames_, n - first);
  const auto at = static_cast<std::size_t>(slot % slots_);
  std::copy_n(raw.begin() + static_cast<std::ptrdiff_t>(first), kept,
              ring_.begin() + static_cast<std::ptrdiff_t>(at * frames_));
  counts_[at] = static_cast<std::uint8_t>(kept);
}

std::span<void* const> frame_capture::frames(std::uint64_t slot) const noexcept {
  if (frames_ == 0) return {};
  const auto at = static_cast<std::size_t>(slot % slots_);
  return {ring_.data() + at * frames_, counts_[at]};
}

}  // namespace strata
