// N sim devices, each behind its own allocator, and the `local`
// communicators over them: the ranks of a collective test.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "strata/communicator.hpp"
#include "strata/strata.hpp"

namespace strata::testing {

struct rank_set {
  std::vector<std::unique_ptr<allocator>> allocs;
  std::vector<stream_handle> streams;
  std::vector<std::unique_ptr<communicator>> comms;

  explicit rank_set(int n, const local_comm_options& o = {},
                    const std::string& spec = "sim:capacity=256MiB") {
    std::vector<device*> devices;
    for (int r = 0; r < n; ++r) {
      allocator_options ao;
      ao.device = spec;
      ao.log_ooms = false;
      allocs.push_back(std::make_unique<allocator>(ao));
      devices.push_back(&allocs.back()->dev());
      auto s = allocs.back()->dev().create_stream();
      if (!s) throw error(s.error());
      streams.push_back(*s);
    }
    auto c = create_local_communicators(devices, o);
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
  // Device memory of rank r (host-reachable on sim).
  template <class T>
  T* alloc(int r, std::size_t count) {
    return static_cast<T*>(allocs[static_cast<std::size_t>(r)]->malloc(count * sizeof(T)));
  }
  void sync_all() {
    for (int r = 0; r < size(); ++r) ASSERT_TRUE(dev(r).synchronize_stream(stream(r)).ok());
  }
};

}  // namespace strata::testing
