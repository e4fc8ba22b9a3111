// N devices, each behind its own allocator, and communicators over them:
// the ranks of a collective test. `local`: sim devices; `nccl`: cuda:0..N-1
// of the stand-in driver with the stand-in NCCL (ctest runs those tests
// with both on the library path; elsewhere `nccl_expected()` is false and
// the tests skip, saying why).
//
// The stand-in NCCL's path is compiled in (STRATA_TEST_NCCL_PATH); ctest
// names the stand-in driver (STRATA_TEST_CUDA_DRIVER) and puts both on
// LD_LIBRARY_PATH.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fakecuda/fakecuda_control.hpp"
#include "strata/communicator.hpp"
#include "strata/nccl.hpp"
#include "strata/strata.hpp"

namespace strata::testing {

enum class comm_kind { local, nccl };

inline const char* kind_name(comm_kind k) {
  return k == comm_kind::local ? "local" : "nccl";
}
inline void PrintTo(comm_kind k, std::ostream* os) {
  *os << kind_name(k);
}

/// The stand-in NCCL's path, or "" when this build has none.
inline const char* nccl_stand_in() {
#ifdef STRATA_TEST_NCCL_PATH
  return STRATA_TEST_NCCL_PATH;
#else
  return "";
#endif
}

/// True when ctest runs this test over the stand-in driver and NCCL. Then
/// asks the stand-in driver for 8 GPUs (it reads FAKECUDA_DEVICES when the
/// first device opens), so call it before opening any.
inline bool nccl_expected() {
  if (!cuda_expected() || *nccl_stand_in() == '\0') return false;
  ::setenv("FAKECUDA_DEVICES", "8", 0);  // NOLINT(concurrency-mt-unsafe): before any thread
  // 4 GiB GPUs: up to eight ranks' allocators share one, each reserving
  // address space by its size, which a ThreadSanitizer process has little
  // of. (Set here: gtest_discover_tests passes one entry per property.)
  ::setenv("FAKECUDA_CAPACITY", "4GiB", 0);  // NOLINT(concurrency-mt-unsafe): before any thread
  return true;
}

/// The nccl options of the tests: the stand-in, and a watchdog short
/// enough for the failure tests.
inline nccl_options test_nccl_options(
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  nccl_options o;
  o.timeout = timeout;
  o.bootstrap_timeout = std::chrono::seconds(20);
  return o;
}

struct rank_set {
  std::vector<std::unique_ptr<allocator>> allocs;
  std::vector<stream_handle> streams;
  std::vector<std::unique_ptr<communicator>> comms;

  explicit rank_set(int n, const local_comm_options& o = {},
                    const std::string& spec = "sim:capacity=256MiB")
      : rank_set(n, comm_kind::local, o, spec) {}

  rank_set(int n, comm_kind kind, const local_comm_options& o = {},
           const std::string& spec = "sim:capacity=256MiB",
           const nccl_options& no = test_nccl_options()) {
    std::vector<device*> devices;
    for (int r = 0; r < n; ++r) {
      allocator_options ao;
      ao.device = kind == comm_kind::local ? spec : "cuda:" + std::to_string(r);
      ao.log_ooms = false;
      allocs.push_back(std::make_unique<allocator>(ao));
      devices.push_back(&allocs.back()->dev());
      auto s = allocs.back()->dev().create_stream();
      if (!s) throw error(s.error());
      streams.push_back(*s);
    }
    auto c = kind == comm_kind::local ? create_local_communicators(devices, o)
                                      : create_nccl_communicators(devices, no);
    if (!c) throw error(c.error());
    comms = std::move(*c);
  }
  rank_set(const rank_set&) = delete;
  rank_set& operator=(const rank_set&) = delete;
  rank_set(rank_set&&) = delete;
  rank_set& operator=(rank_set&&) = delete;
  ~rank_set() {
    for (std::size_t r = 0; r < allocs.size(); ++r) {
      (void)allocs[r]->dev().synchronize_stream(streams[r]);
      (void)allocs[r]->dev().destroy_stream(streams[r]);
    }
    comms.clear();
  }

  [[nodiscard]] int size() const { return static_cast<int>(allocs.size()); }
  device& dev(int r) { return allocs[static_cast<std::size_t>(r)]->dev(); }
  stream_handle stream(int r) { return streams[static_cast<std::size_t>(r)]; }
  communicator& comm(int r) { return *comms[static_cast<std::size_t>(r)]; }
  // Device memory of rank r (host-reachable on sim and on the stand-in).
  template <class T>
  T* alloc(int r, std::size_t count) {
    return static_cast<T*>(allocs[static_cast<std::size_t>(r)]->malloc(count * sizeof(T)));
  }
  void sync_all() {
    for (int r = 0; r < size(); ++r) ASSERT_TRUE(dev(r).synchronize_stream(stream(r)).ok());
  }
};

}  // namespace strata::testing
