// Names for captured return addresses, at export: the function (demangled)
// and the object it lies in, through dladdr. Functions the dynamic symbol
// table does not name (static or hidden ones) read as "object+0xoffset",
// which addr2line resolves. Results are cached per address.
//
// Thread safety: one instance per export; not shared.
#pragma once

#include <string>
#include <unordered_map>

namespace strata {

struct frame_symbol {
  std::string name;      // "train_step(int)" or "libfoo.so+0x1234"
  std::string filename;  // the object's path
};

class frame_symbols {
 public:
  const frame_symbol& of(void* pc);

 private:
  std::unordered_map<void*, frame_symbol> cache_;
};

}  // namespace strata
