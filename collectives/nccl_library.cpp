#include "nccl_library.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "strata/shared_library.hpp"

namespace strata::nccl {
namespace {

struct opened {
  std::string file;  // shared_library keeps a pointer to it
  std::unique_ptr<shared_library> lib;
  library table;
  status why;  // why it is unusable, or OK
};

status resolve(const shared_library& so, library& t) {
  const auto need = [&](const char* name, auto& fn) { return so.find(name, fn); };
  ncclResult_t (*get_version)(int*) = nullptr;
  const bool all =
      need("ncclGetVersion", get_version) && need("ncclGetUniqueId", t.get_unique_id) &&
      need("ncclCommInitRank", t.comm_init_rank) && need("ncclCommDestroy", t.comm_destroy) &&
      need("ncclCommAbort", t.comm_abort) &&
      need("ncclCommGetAsyncError", t.comm_get_async_error) &&
      need("ncclGetErrorString", t.get_error_string) && need("ncclAllReduce", t.all_reduce) &&
      need("ncclReduceScatter", t.reduce_scatter) && need("ncclAllGather", t.all_gather) &&
      need("ncclBroadcast", t.broadcast) && need("ncclGroupStart", t.group_start) &&
      need("ncclGroupEnd", t.group_end);
  if (!all) {
    return {errc::not_supported,
            t.file +
                " lacks a function Strata needs (ncclGetVersion, ncclCommInitRank, the "
                "collectives, groups or error calls): not an NCCL 2 library"};
  }
  if (get_version(&t.version) != ncclSuccess) {
    return {errc::not_supported, t.file + ": ncclGetVersion failed"};
  }
  if (t.version < min_version) {
    return {errc::not_supported, t.file + " is NCCL " + version_text(t.version) +
                                     "; Strata needs NCCL 2.10 or newer (ncclAvg, bfloat16)"};
  }
  (void)so.find("ncclGetLastError", t.get_last_error);
  if (t.version >= register_version) {
    (void)so.find("ncclCommRegister", t.comm_register);
    (void)so.find("ncclCommDeregister", t.comm_deregister);
  }
  return {};
}

}  // namespace

std::string version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

status library::error(const std::string& what, result_t r, comm_t comm) const {
  std::string text = "NCCL " + what + " failed: " + get_error_string(r) + " (ncclResult_t " +
                     std::to_string(r) + ")";
  if (get_last_error != nullptr) {
    const char* last = get_last_error(comm);
    if (last != nullptr && *last != '\0') text += ": " + std::string(last);
  }
  return {errc::comm_error, text};
}

result<const library*> load(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<opened>> loaded;  // never unloaded
  std::lock_guard lock(mu);
  auto& entry = loaded[file];
  if (entry == nullptr) {
    entry = std::make_unique<opened>();
    entry->file = file;
    entry->table.file = file;
    entry->lib = std::make_unique<shared_library>(entry->file.c_str());
    if (auto s = entry->lib->open(); !s) {
      entry->why = {errc::not_supported, "cannot load NCCL (" + file + "): " + s.message() +
                                             "; install NCCL 2 or put libnccl.so.2 on the "
                                             "library path"};
    } else {
      entry->why = resolve(*entry->lib, entry->table);
    }
  }
  if (!entry->why) return entry->why;
  return &entry->table;
}

}  // namespace strata::nccl
