// The stand-in driver itself: it refuses what the CUDA documentation
// forbids, with the documented result, so Strata's cuda device cannot pass
// its tests by breaking a rule. ctest runs each test in a fresh process with
// FAKECUDA_CAPACITY=64MiB.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "fakecuda.h"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr std::size_t page = 2 * mib;  // the stand-in's default granularity

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

CUmemAccessDesc read_write() {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// cuInit, the primary context of device 0 made current.
class StandIn : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(0); }

  static CUdeviceptr reserve(std::size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAddressReserve(&p, bytes, 0, 0, 0), CUDA_SUCCESS);
    return p;
  }
  static CUmemGenericAllocationHandle create(std::size_t bytes) {
    const CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(cuMemCreate(&h, bytes, &prop, 0), CUDA_SUCCESS);
    return h;
  }

  CUcontext ctx_ = nullptr;
};

TEST(StandInBeforeInit, OnlyVersionProcAddressAndErrorNamesWork) {
  int n = 0;
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_GE(version, 12000);
  void* fn = nullptr;
  EXPECT_EQ(cuGetProcAddress("cuInit", &fn, 12000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuInit));
  const char* name = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_NOT_INITIALIZED");
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE) << "cuInit flags must be 0";
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
}

TEST(StandInContext, ContextCallsNeedALiveCurrentContext) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * mib) << "FAKECUDA_CAPACITY=64MiB sets the capacity";
  EXPECT_EQ(free, total);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  CUdevice dev = 0;
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(StandIn, SizesAddressesAndOffsetsMustBeGranular) {
  const CUmemAllocationProp prop = device_prop();
  std::size_t g = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(g, page);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAddressReserve(&p, page + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&p, page, 3 * page, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&p, page, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, page, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  const CUdeviceptr base = reserve(4 * page);
  h = create(2 * page);
  EXPECT_EQ(cuMemMap(base + 4096, page, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base, page + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base, page, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base, 2 * page, page, h, 0), CUDA_ERROR_INVALID_VALUE)
      << "offset + size beyond the allocation";
  EXPECT_EQ(cuMemMap(base, page, page, h, 0), CUDA_ERROR_NOT_SUPPORTED)
      << "a granular offset: the H200's driver (580) refused it";
  EXPECT_EQ(cuMemMap(base, page, 0, h, 0), CUDA_SUCCESS) << "the run's start, part of it";
  EXPECT_EQ(cuMemUnmap(base, page), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(base, 4 * page), CUDA_SUCCESS);
}

TEST_F(StandIn, MappingsStayInsideOneReservationAndNeverOverlap) {
  const CUdeviceptr base = reserve(4 * page);
  const CUmemGenericAllocationHandle h = create(2 * page);
  EXPECT_EQ(cuMemMap(base + 3 * page, 2 * page, 0, h, 0), CUDA_ERROR_INVALID_VALUE)
      << "runs past the reservation";
  static char host[4096];
  EXPECT_EQ(cuMemMap(reinterpret_cast<CUdeviceptr>(host), page, 0, h, 0), CUDA_ERROR_INVALID_VALUE)
      << "not a reservation";
  ASSERT_EQ(cuMemMap(base, 2 * page, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base + page, page, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "over a mapping";
  EXPECT_EQ(cuMemUnmap(base, page), CUDA_ERROR_INVALID_VALUE) << "part of a mapping";
  EXPECT_EQ(cuMemUnmap(base, 4 * page), CUDA_ERROR_INVALID_VALUE) << "more than a mapping";
  EXPECT_EQ(cuMemAddressFree(base, 4 * page), CUDA_ERROR_INVALID_VALUE) << "still mapped";
  EXPECT_EQ(cuMemAddressFree(base, 2 * page), CUDA_ERROR_INVALID_VALUE) << "not its size";
  const CUmemAccessDesc rw = read_write();
  EXPECT_EQ(cuMemSetAccess(base, page, &rw, 1), CUDA_ERROR_INVALID_VALUE) << "part of a mapping";
  EXPECT_EQ(cuMemSetAccess(base, 4 * page, &rw, 1), CUDA_ERROR_INVALID_VALUE) << "a gap";
  EXPECT_EQ(cuMemSetAccess(base, 2 * page, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(base, 2 * page), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE) << "released twice";
  EXPECT_EQ(cuMemAddressFree(base, 4 * page), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_objects(), 0u);
}

TEST_F(StandIn, ReleasedMemoryLivesUntilItsLastMappingIsGone) {
  const CUdeviceptr base = reserve(2 * page);
  const CUmemGenericAllocationHandle h = create(page);
  ASSERT_EQ(cuMemMap(base, page, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base + page, page, 0, h, 0), CUDA_SUCCESS);
  const CUmemAccessDesc rw = read_write();
  ASSERT_EQ(cuMemSetAccess(base, 2 * page, &rw, 1), CUDA_SUCCESS);
  auto* first = reinterpret_cast<unsigned char*>(base);
  std::memset(first, 0x5a, 64);
  EXPECT_EQ(first[page], 0x5a) << "two mappings of one allocation alias";
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base, page, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "a released handle";
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total - free, page) << "still mapped, so still held";
  EXPECT_EQ(first[page + 1], 0x5a);
  ASSERT_EQ(cuMemUnmap(base, page), CUDA_SUCCESS);
  EXPECT_EQ(first[page + 2], 0x5a) << "one mapping keeps it alive";
  ASSERT_EQ(cuMemUnmap(base + page, page), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, total);
  EXPECT_EQ(cuMemAddressFree(base, 2 * page), CUDA_SUCCESS);
}

TEST_F(StandIn, PlainAllocationsAreRoundedAndFreedOnce) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAlloc(&p, 100), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(p), 1, 100);  // mapped with access
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total - free, page) << "rounded up to the granularity";
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuMemFree(p + 256), CUDA_ERROR_INVALID_VALUE) << "not the start of an allocation";
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE) << "freed twice";
  int not_a_stream = 0;
  EXPECT_EQ(cuMemAllocAsync(&p, 100, reinterpret_cast<CUstream>(&not_a_stream)),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuMemAllocAsync(&p, 100, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_objects(), 0u);
}

TEST_F(StandIn, CapacityIsEnforced) {
  const CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, 66 * mib, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  h = create(64 * mib);
  CUmemGenericAllocationHandle more = 0;
  EXPECT_EQ(cuMemCreate(&more, page, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(StandIn, MemoryIsInaccessibleUntilSetAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const CUdeviceptr base = reserve(page);
  const CUmemGenericAllocationHandle h = create(page);
  ASSERT_EQ(cuMemMap(base, page, 0, h, 0), CUDA_SUCCESS);
  auto* bytes = reinterpret_cast<volatile unsigned char*>(base);
  EXPECT_DEATH(bytes[0] = 1, "") << "mapped memory must fault before cuMemSetAccess";
  static unsigned char host[64];
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyAsync(base, reinterpret_cast<CUdeviceptr>(host), sizeof host, s),
            CUDA_ERROR_INVALID_VALUE);
  const CUmemAccessDesc rw = read_write();
  ASSERT_EQ(cuMemSetAccess(base, page, &rw, 1), CUDA_SUCCESS);
  bytes[0] = 1;
  EXPECT_EQ(cuMemcpyAsync(base, reinterpret_cast<CUdeviceptr>(host), sizeof host, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(base, page), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(base, page), CUDA_SUCCESS);
}

void set_flag(void* p) {
  *static_cast<volatile int*>(p) = 1;
}

TEST(StandInStreams, EventsFollowStreamOrderAndHandlesAreChecked) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_configure(0, "capacity=64MiB,op_delay_us=20000"), 0);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_configure(0, "capacity=32MiB"), -1) << "refused while a context is held";
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUstream a = nullptr;
  CUstream b = nullptr;
  EXPECT_EQ(cuStreamCreate(&a, 4), CUDA_ERROR_INVALID_VALUE) << "unknown flag";
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE)
      << "interprocess needs disable-timing";
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS) << "never recorded counts as complete";
  volatile int a_done = 0;
  ASSERT_EQ(cuLaunchHostFunc(a, set_flag, const_cast<int*>(&a_done)), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  volatile int b_done = 0;
  ASSERT_EQ(cuStreamWaitEvent(b, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(b, set_flag, const_cast<int*>(&b_done)), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(a_done, 1) << "b ran past its wait before a reached the event";
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  ASSERT_EQ(cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuStreamDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuStreamDestroy(b), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

TEST_F(StandIn, PinnedHostMemoryRules) {
  void* p = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&p, 1 << 20, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(p, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE) << "freed twice";
  static char buf[8192];
  ASSERT_EQ(cuMemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(buf + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostUnregister(buf + 100), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(fakecuda_live_objects(), 0u);
}

TEST(StandInProcAddress, BaseNamesAtTheTwelveAbiAndClearMisses) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress("cuMemGetInfo", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemGetInfo_v2));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(cuGetProcAddress("cuNoSuchCall", &fn, 12000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(cuGetProcAddress("cuMemMap", &fn, 11040, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress("cuMemMap", &fn, 12000, 8, &status), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StandIn, CallsAreRecordedAndFailuresInjectedAtTheNthCall) {
  fakecuda_reset_calls();
  ASSERT_EQ(fakecuda_fail_call("cuMemCreate", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  const CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h1 = 0;
  CUmemGenericAllocationHandle h2 = 0;
  CUmemGenericAllocationHandle h3 = 0;
  EXPECT_EQ(cuMemCreate(&h1, page, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemCreate(&h2, page, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY) << "injected";
  EXPECT_EQ(cuMemCreate(&h3, page, &prop, 0), CUDA_SUCCESS) << "an injection fires once";
  EXPECT_EQ(fakecuda_call_count("cuMemCreate"), 3u);
  EXPECT_EQ(cuMemRelease(h1), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h3), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_call_count(nullptr), 5u);
  std::string text(fakecuda_format_calls(nullptr, 0, 3) + 1, '\0');
  text.resize(fakecuda_format_calls(text.data(), text.size(), 3));
  EXPECT_NE(text.find("cuMemCreate(handle="), std::string::npos) << text;
  EXPECT_NE(text.find("size=0x200000"), std::string::npos) << text;
  EXPECT_NE(text.find("cuMemRelease(handle="), std::string::npos) << text;
  EXPECT_EQ(fakecuda_fail_call("cuMemCreate", 0, 2), -1);
}

}  // namespace
