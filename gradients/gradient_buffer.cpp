// The gradient buffer's layout and its single page run. Invariants: every
// offset is a multiple of the alignment; gradients do not overlap; bytes_
// is the end of the last gradient in order; [base_, base_ + reserved_) is
// one reservation with one mapping of one page run.
#include "strata/gradient_buffer.hpp"

#include <limits>
#include <string>

namespace strata {

namespace {

status buffer_error(const std::string& why) {
  return {errc::invalid_argument, "gradient buffer: " + why};
}

}  // namespace

result<std::unique_ptr<gradient_buffer>> gradient_buffer::create(
    device& dev, std::span<const gradient_param> params, std::span<const std::size_t> order,
    std::size_t alignment) {
  if (params.empty()) return buffer_error("no parameters");
  if (alignment < 16 || (alignment & (alignment - 1)) != 0) {
    return buffer_error("alignment " + std::to_string(alignment) + " is not a power of two >= 16");
  }
  std::vector<std::size_t> layout(order.begin(), order.end());
  if (layout.empty()) {
    for (std::size_t p = params.size(); p-- > 0;) layout.push_back(p);
  }
  if (layout.size() != params.size())
    return buffer_error("the order does not list every parameter");
  std::vector<bool> seen(params.size(), false);
  for (const std::size_t p : layout) {
    if (p >= params.size() || seen[p]) return buffer_error("the order is not a permutation");
    seen[p] = true;
  }
  constexpr std::size_t limit = std::numeric_limits<std::size_t>::max() / 4;
  std::vector<std::size_t> offsets(params.size(), 0);
  std::size_t end = 0;
  for (const std::size_t p : layout) {
    const gradient_param& g = params[p];
    if (g.type != dtype::f32 && g.type != dtype::bf16 && g.type != dtype::f16) {
      return buffer_error("parameter " + std::to_string(p) + " has an unknown dtype");
    }
    if (g.count == 0 || g.count > limit / dtype_size(g.type) || end > limit) {
      return buffer_error("parameter " + std::to_string(p) + " has a zero or absurd element count");
    }
    const std::size_t at = (end + alignment - 1) & ~(alignment - 1);
    offsets[p] = at;
    end = at + g.count * dtype_size(g.type);
    if (end > limit) return buffer_error("the buffer's size overflows");
  }
  std::unique_ptr<gradient_buffer> b(new gradient_buffer(
      dev, {params.begin(), params.end()}, std::move(layout), std::move(offsets), end));
  const std::size_t g = dev.granularity();
  b->reserved_ = (end + g - 1) / g * g;
  auto pages = dev.create_pages(b->reserved_);
  if (!pages) return pages.error();
  b->pages_ = *pages;
  auto va = dev.reserve(b->reserved_);
  if (!va) return va.error();  // the destructor releases the pages
  b->base_ = *va;
  if (auto s = dev.map(b->base_, b->reserved_, b->pages_); !s) {
    (void)dev.free_reservation(b->base_, b->reserved_);
    b->base_ = 0;
    return s;
  }
  if (auto s = dev.set_access(b->base_, b->reserved_); !s) return s;
  return b;
}

gradient_buffer::gradient_buffer(device& dev, std::vector<gradient_param> params,
                                 std::vector<std::size_t> order, std::vector<std::size_t> offsets,
                                 std::size_t bytes)
    : dev_(dev),
      params_(std::move(params)),
      order_(std::move(order)),
      offsets_(std::move(offsets)),
      bytes_(bytes) {}

gradient_buffer::~gradient_buffer() {
  if (base_ != 0) {
    (void)dev_.unmap(base_, reserved_);
    (void)dev_.free_reservation(base_, reserved_);
  }
  if (pages_.bytes != 0) (void)dev_.release_pages(pages_);
}

void* gradient_buffer::view(std::size_t p) const noexcept {
  return p < params_.size() ? reinterpret_cast<void*>(base_ + offsets_[p]) : nullptr;
}

std::size_t gradient_buffer::offset(std::size_t p) const noexcept {
  return p < params_.size() ? offsets_[p] : 0;
}

std::size_t gradient_buffer::bytes_of(std::size_t p) const noexcept {
  return p < params_.size() ? params_[p].count * dtype_size(params_[p].type) : 0;
}

gradient_param gradient_buffer::param(std::size_t p) const noexcept {
  return p < params_.size() ? params_[p] : gradient_param{};
}

status gradient_buffer::zero(stream_handle stream) {
  return dev_.memset_async(data(), 0, bytes_, stream);
}

}  // namespace strata
