// A shared library opened with dlopen when it is first needed, and the
// functions looked up in it: how Strata reaches the CUDA driver, NCCL and
// (in the preload shim) the functions it interposes on, none of which
// libstrata links.
//
// A library, once opened, stays loaded for the life of the process: the
// CUDA driver must not be unloaded while contexts exist. The object only
// records the handle; destroying it closes nothing.
//
// Thread safety: every call may be made from any thread; the first call
// that needs the library opens it, exactly once.
#pragma once

#include <mutex>
#include <string>

#include "strata/error.hpp"
#include "strata/export.hpp"

namespace strata {

class STRATA_API shared_library {
 public:
  /// How the library is opened.
  enum class open_mode {
    load,               ///< Load it if it is not loaded yet.
    if_already_loaded,  ///< Only find it if the process loaded it (never load it).
  };

  /// `file` (a soname such as "libcuda.so.1", searched as dlopen searches)
  /// is not opened until a call below needs it. `file` must outlive this
  /// object (a string literal).
  explicit shared_library(const char* file, open_mode mode = open_mode::load) noexcept
      : file_(file), mode_(mode) {}
  shared_library(const shared_library&) = delete;
  shared_library& operator=(const shared_library&) = delete;
  shared_library(shared_library&&) = delete;
  shared_library& operator=(shared_library&&) = delete;
  ~shared_library() = default;

  /// Opens the library (first call only). Errors: not_supported, dlopen's
  /// reason as the message, when it cannot be opened (or, `if_already_loaded`,
  /// is not loaded); every later call returns the same.
  [[nodiscard]] status open() const;
  /// The address of `symbol` in the library, or null when the library
  /// cannot be opened or lacks it.
  [[nodiscard]] void* find(const char* symbol) const;
  /// `find`, stored into the function pointer `fn`; true if found.
  template <class Fn>
  bool find(const char* symbol, Fn& fn) const {
    fn = reinterpret_cast<Fn>(find(symbol));
    return fn != nullptr;
  }
  /// The file this object opens.
  [[nodiscard]] const char* file() const noexcept { return file_; }

  /// The definition of `symbol` that comes after Strata's own shared object
  /// in the process's search order (dlsym(RTLD_NEXT)): the function an
  /// interposer (LD_PRELOAD) forwards to. Null if there is none.
  [[nodiscard]] static void* find_next(const char* symbol);

 private:
  const char* file_;
  open_mode mode_;
  mutable std::once_flag once_;
  mutable void* handle_ = nullptr;
  mutable std::string why_;  // dlopen's reason when handle_ is null
};

}  // namespace strata
