// The names of every pickle opcode (Python's Lib/pickletools.py), for error
// messages: "offset 12: unsupported pickle opcode 0x8e (BINBYTES8)".
//
// Thread safety: a pure function.
#pragma once

namespace strata::replay {

/// The opcode's name, or "not an opcode" for bytes no protocol defines.
const char* pickle_opcode_name(unsigned char op) noexcept;

}  // namespace strata::replay
