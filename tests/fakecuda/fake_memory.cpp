// Device and pinned host memory of the stand-in driver: the VMM calls with
// the driver's rules, over the sim device's memory.
#include <bit>

#include "fake_driver.hpp"

namespace fakecuda {

namespace {

bool valid_prop(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

std::uintptr_t addr(CUdeviceptr p) {
  return static_cast<std::uintptr_t>(p);
}

}  // namespace

const fake_driver::reservation_info* fake_driver::reservation_of(std::uintptr_t va,
                                                                 std::size_t bytes) {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return nullptr;
  --it;
  const std::uintptr_t base = it->first;
  const bool inside = bytes <= it->second.bytes && va - base <= it->second.bytes - bytes;
  return inside ? &it->second : nullptr;
}

void fake_driver::maybe_forget(CUmemGenericAllocationHandle handle) {
  auto it = handles_.find(handle);
  if (it != handles_.end() && it->second.released && it->second.mappings == 0) handles_.erase(it);
}

CUresult fake_driver::mem_get_info(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = current().sim->get_memory_info();
  if (!info) return to_result(info.error());
  *free = info->free;
  *total = info->total;
  return CUDA_SUCCESS;
}

CUresult fake_driver::granularity(size_t* g, const CUmemAllocationProp* prop,
                                  CUmemAllocationGranularity_flags option) {
  if (g == nullptr || !valid_prop(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(mu_);
  const int id = prop->location.id;
  if (id < 0 || id >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  *g = gpus_[static_cast<std::size_t>(id)].sim->granularity();
  return CUDA_SUCCESS;
}

CUresult fake_driver::address_reserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                      CUdeviceptr /*addr: a hint, not honoured*/,
                                      unsigned long long flags) {
  if (ptr == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  gpu& g = current();
  const std::size_t gran = g.sim->granularity();
  if (size % gran != 0 || (alignment != 0 && !std::has_single_bit(alignment))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(mu_);
  auto base = g.sim->reserve(size, alignment);
  if (!base) return to_result(base.error());
  reservations_[*base] = {current_ordinal(), size};
  *ptr = static_cast<CUdeviceptr>(*base);
  return CUDA_SUCCESS;
}

CUresult fake_driver::address_free(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(addr(ptr));
  if (it == reservations_.end() || it->second.bytes != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = mappings_.lower_bound(addr(ptr));
  if (m != mappings_.end() && m->first < addr(ptr) + size) return CUDA_ERROR_INVALID_VALUE;
  gpu& g = gpus_[static_cast<std::size_t>(it->second.ordinal)];
  if (auto s = g.sim->free_reservation(addr(ptr), size); !s) return to_result(s);
  reservations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_create(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || size == 0 || flags != 0 || !valid_prop(prop)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(mu_);
  const int id = prop->location.id;
  if (id < 0 || id >= static_cast<int>(gpus_.size())) return CUDA_ERROR_INVALID_DEVICE;
  gpu& g = gpus_[static_cast<std::size_t>(id)];
  if (size % g.sim->granularity() != 0) return CUDA_ERROR_INVALID_VALUE;
  auto run = g.sim->create_pages(size);
  if (!run) return to_result(run.error());
  const CUmemGenericAllocationHandle h = next_handle_++;
  handles_.emplace(h, handle_info{id, *run});
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_release(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  gpu& g = gpus_[static_cast<std::size_t>(it->second.ordinal)];
  if (auto s = g.sim->release_pages(it->second.run); !s) return to_result(s);
  it->second.released = true;
  maybe_forget(handle);
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_map(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (ptr == 0 || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  auto h = handles_.find(handle);
  if (h == handles_.end() || h->second.released) return CUDA_ERROR_INVALID_VALUE;
  gpu& g = gpus_[static_cast<std::size_t>(h->second.ordinal)];
  const std::size_t gran = g.sim->granularity();
  if (addr(ptr) % gran != 0 || size % gran != 0 || offset % gran != 0 ||
      offset > h->second.run.bytes || size > h->second.run.bytes - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reservation_of(addr(ptr), size) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto next = mappings_.lower_bound(addr(ptr));
  const bool hits_next = next != mappings_.end() && next->first < addr(ptr) + size;
  const bool hits_prev = next != mappings_.begin() &&
                         std::prev(next)->first + std::prev(next)->second.bytes > addr(ptr);
  if (hits_next || hits_prev) return CUDA_ERROR_INVALID_VALUE;
  // As the H200's driver (580) did: a run maps only from its start.
  if (offset != 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (auto s = g.sim->map(addr(ptr), size, h->second.run); !s) return to_result(s);
  mappings_.emplace(addr(ptr), mapping_info{size, handle});
  ++h->second.mappings;
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_unmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(mu_);
  auto m = mappings_.find(addr(ptr));
  if (m == mappings_.end() || m->second.bytes != size) return CUDA_ERROR_INVALID_VALUE;
  const CUmemGenericAllocationHandle handle = m->second.handle;
  handle_info& h = handles_.at(handle);
  gpu& g = gpus_[static_cast<std::size_t>(h.ordinal)];
  if (auto s = g.sim->unmap(addr(ptr), size); !s) return to_result(s);
  mappings_.erase(m);
  --h.mappings;
  maybe_forget(handle);
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                     size_t count) {
  if (ptr == 0 || size == 0 || desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  bool read_write = false;
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id < 0 || desc[i].location.id >= static_cast<int>(gpus_.size())) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      read_write = true;
    } else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
               desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // The range must consist of whole mappings, with no gap.
  auto m = mappings_.find(addr(ptr));
  if (m == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;
  const int ordinal = handles_.at(m->second.handle).ordinal;
  std::uintptr_t end = addr(ptr);
  while (m != mappings_.end() && m->first == end && end < addr(ptr) + size) {
    end += m->second.bytes;
    ++m;
  }
  if (end != addr(ptr) + size) return CUDA_ERROR_INVALID_VALUE;
  // Read-only and no-access descriptors are accepted but not modelled.
  if (!read_write) return CUDA_ERROR_NOT_SUPPORTED;
  gpu& g = gpus_[static_cast<std::size_t>(ordinal)];
  return to_result(g.sim->set_access(addr(ptr), size));
}

CUresult fake_driver::mem_alloc(CUdeviceptr* ptr, size_t size) {
  if (ptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const int ordinal = current_ordinal();
  gpu& g = current();
  const std::size_t gran = g.sim->granularity();
  const std::size_t bytes = (size + gran - 1) / gran * gran;
  std::lock_guard lock(mu_);
  auto base = g.sim->reserve(bytes, 0);
  if (!base) return to_result(base.error());
  auto run = g.sim->create_pages(bytes);
  strata::status s = run ? g.sim->map(*base, bytes, *run) : run.error();
  if (s) s = g.sim->set_access(*base, bytes);
  if (!s) {
    if (run) {
      (void)g.sim->unmap(*base, bytes);
      (void)g.sim->release_pages(*run);
    }
    (void)g.sim->free_reservation(*base, bytes);
    return to_result(s);
  }
  allocations_.emplace(*base, allocation_info{ordinal, bytes, *run});
  *ptr = static_cast<CUdeviceptr>(*base);
  return CUDA_SUCCESS;
}

CUresult fake_driver::mem_free(CUdeviceptr ptr) {
  std::lock_guard lock(mu_);
  auto it = allocations_.find(addr(ptr));
  if (it == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  gpu& g = gpus_[static_cast<std::size_t>(it->second.ordinal)];
  const std::size_t bytes = it->second.bytes;
  if (auto s = g.sim->unmap(addr(ptr), bytes); !s) return to_result(s);
  (void)g.sim->release_pages(it->second.run);
  (void)g.sim->free_reservation(addr(ptr), bytes);
  allocations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_driver::host_alloc(void** ptr, size_t size, unsigned flags) {
  constexpr unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (ptr == nullptr || size == 0 || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  auto p = gpus_[0].sim->host_alloc(size);  // pinned host memory is process-wide
  if (!p) return to_result(p.error());
  ++host_objects_;
  *ptr = *p;
  return CUDA_SUCCESS;
}

CUresult fake_driver::free_host(void* ptr) {
  std::lock_guard lock(mu_);
  if (ptr == nullptr || !gpus_[0].sim->host_free(ptr)) return CUDA_ERROR_INVALID_VALUE;
  --host_objects_;
  return CUDA_SUCCESS;
}

CUresult fake_driver::host_register(void* ptr, size_t size, unsigned flags) {
  constexpr unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (ptr == nullptr || size == 0 || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (!gpus_[0].sim->host_register(ptr, size)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  ++host_objects_;
  return CUDA_SUCCESS;
}

CUresult fake_driver::host_unregister(void* ptr) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (!gpus_[0].sim->host_unregister(ptr)) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  --host_objects_;
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
