// Device <-> NVMe through two pinned staging chunks, for buffers the host
// tier cannot hold (residency.hpp).
//
// Spill: chunk i is copied device -> staging slot i % 2 on the spill stream
// while chunk i - 1 is written from the other slot; the extent is begun
// before the first chunk and finished by the last (its trailer carries the
// checksum of every chunk in order), then read back and checked
// (nvme_verify) before the device block is freed. Fill: chunk i is read
// into slot i % 2 (checksum running) and copied to the device on the fill
// stream while the next is read; a slot is reused only after its copy is
// done. The device copy counts only once the whole checksum matches: on a
// mismatch the device block is freed and the buffer stays on NVMe.
//
// Cost: two staging chunks of host memory for the duration; the thread
// waits for the last copy (as the unstaged NVMe fill waits for its read).
// A prefetch of a buffer the host tier cannot hold streams in the same way
// on the reader thread (prefetch_fill.cpp), on the reader's own stream and
// events.
#include <algorithm>

#include "pinned_host_pool.hpp"
#include "residency_core.hpp"
#include "strata/nvme_store.hpp"

namespace strata {

namespace {

// Two staging chunks from the host pool, or (when the host tier is full)
// the manager's two reserved ones; given back on scope exit.
class staging_slots {
 public:
  staging_slots(pinned_host_pool& pool, bool& reserve_in_use)
      : pool_(pool), reserve_in_use_(reserve_in_use) {}
  staging_slots(const staging_slots&) = delete;
  staging_slots& operator=(const staging_slots&) = delete;
  staging_slots(staging_slots&&) = delete;
  staging_slots& operator=(staging_slots&&) = delete;
  ~staging_slots() {
    if (reserved_) {
      reserve_in_use_ = false;
      return;
    }
    for (void* p : slots_) {
      if (p != nullptr) pool_.free(p);
    }
  }
  unsigned char* operator[](std::size_t i) const { return static_cast<unsigned char*>(slots_[i]); }
  // Fills both slots: from the pool through `take`, else the reserve.
  template <class Take>
  status fill(Take&& take, void* const reserve[2], std::size_t bytes) {
    for (void*& slot : slots_) {
      auto p = take(bytes);
      if (p) {
        slot = *p;
        continue;
      }
      if (p.code() != errc::out_of_memory || reserve_in_use_ || reserve[0] == nullptr) {
        return p.error();
      }
      for (void*& s : slots_) {  // the pool's chunks back; the reserve serves both
        if (s != nullptr) pool_.free(s);
        s = nullptr;
      }
      slots_[0] = reserve[0];
      slots_[1] = reserve[1];
      reserved_ = true;
      reserve_in_use_ = true;
      return {};
    }
    return {};
  }

 private:
  pinned_host_pool& pool_;
  bool& reserve_in_use_;
  void* slots_[2] = {nullptr, nullptr};
  bool reserved_ = false;
};

}  // namespace

status residency_core::stream_to_nvme(buffer& b) {
  staging_slots slots(*host_, reserve_in_use_);
  if (auto s = slots.fill([this](std::size_t n) { return host_memory(n); }, reserve_,
                          std::min(staging_chunk_, b.bytes));
      !s) {
    return s;
  }
  auto extent = nvme_->begin_write(b.bytes);
  while (!extent && extent.code() == errc::out_of_memory && drop_a_kept_extent()) {
    extent = nvme_->begin_write(b.bytes);
  }
  if (!extent) return extent.error();
  device& d = alloc_.dev();
  const auto* src = static_cast<const unsigned char*>(b.device);
  const std::size_t chunks = (b.bytes + staging_chunk_ - 1) / staging_chunk_;
  const auto length = [&](std::size_t i) {
    return std::min(staging_chunk_, b.bytes - i * staging_chunk_);
  };
  const auto queue_copy = [&](std::size_t i) -> status {
    if (auto s = d.copy_async(slots[i % 2], src + i * staging_chunk_, length(i),
                              copy_direction::device_to_host, spill_stream_);
        !s) {
      return s;
    }
    return d.record_event(staging_done_[i % 2], spill_stream_);
  };
  // After the work the releasing stream had queued on the buffer.
  status st = b.has_release_event ? d.stream_wait_event(spill_stream_, b.released) : status{};
  if (st) st = queue_copy(0);
  for (std::size_t i = 0; st && i < chunks; ++i) {
    st = d.synchronize_event(staging_done_[i % 2]);
    if (st && i + 1 < chunks) st = queue_copy(i + 1);  // overlaps the write below
    if (st) st = nvme_->write_part(*extent, slots[i % 2], length(i));
  }
  if (st && verify_nvme_) {
    st = nvme_->verify(*extent);
    if (!st) (void)nvme_->erase(*extent);
  } else if (!st) {
    (void)d.synchronize_stream(spill_stream_);  // no copy may still write a slot
    (void)nvme_->abandon_write(*extent);        // a failed part already freed it
  }
  if (!st) return st;  // the device copy stays the buffer's
  (void)alloc_.try_free(b.device);
  b.device = nullptr;
  b.extent = *extent;
  moved(b, tier::nvme, accounts_.c.spills_to_nvme);
  return {};
}

status residency_core::stream_in(std::uint64_t extent, void* dev, std::size_t bytes,
                                 void* const slots[2], stream_handle stream,
                                 const event_handle done[2]) {
  device& d = alloc_.dev();
  auto* dst = static_cast<unsigned char*>(dev);
  const std::size_t chunks = (bytes + staging_chunk_ - 1) / staging_chunk_;
  std::uint32_t crc = 0;
  status st;
  for (std::size_t i = 0; st && i < chunks; ++i) {
    const std::size_t len = std::min(staging_chunk_, bytes - i * staging_chunk_);
    // The slot's previous copy (chunk i - 2) must be done before it is reused.
    if (i >= 2) st = d.synchronize_event(done[i % 2]);
    if (st) st = nvme_->read_part(extent, i * staging_chunk_, slots[i % 2], len, crc);
    if (st) {
      st = d.copy_async(dst + i * staging_chunk_, slots[i % 2], len, copy_direction::host_to_device,
                        stream);
    }
    if (st) st = d.record_event(done[i % 2], stream);
  }
  if (st) st = nvme_->check_read(extent, crc);
  // The slots go back after this returns: every copy from them must be done.
  if (auto synced = d.synchronize_stream(stream); st && !synced) st = synced;
  return st;
}

status residency_core::stream_from_nvme(buffer& b, void* dev) {
  staging_slots slots(*host_, reserve_in_use_);
  if (auto s = slots.fill([this](std::size_t n) { return host_memory(n); }, reserve_,
                          std::min(staging_chunk_, b.bytes));
      !s) {
    return s;
  }
  void* const chunks[2] = {slots[0], slots[1]};
  if (auto st = stream_in(b.extent, dev, b.bytes, chunks, fill_stream_, staging_done_); !st) {
    return st;  // the caller frees `dev`; the buffer stays on NVMe
  }
  keep_extent(b);  // the copies are done: nothing for the acquirer to wait on
  b.device = dev;
  moved(b, tier::device, accounts_.c.fills_from_nvme);
  return {};
}

}  // namespace strata
