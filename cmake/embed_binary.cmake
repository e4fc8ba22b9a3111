# Writes a C++ source holding a binary file as a byte array:
#   cmake -DIN=<file> -DOUT=<file.cpp> -DNAME=<symbol> -P cmake/embed_binary.cmake
# defines `extern const unsigned char NAME[]` (64-byte aligned) and
# `extern const std::size_t NAME_size`, in namespace strata::kernels.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR bytes "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
       "\\1\n" body "${body}")
file(WRITE ${OUT} "// Generated from ${IN} by cmake/embed_binary.cmake: do not edit.\n"
                  "#include <cstddef>\n"
                  "namespace strata::kernels {\n"
                  "extern const std::size_t ${NAME}_size;\n"
                  "extern const unsigned char ${NAME}[];\n"
                  "alignas(64) const unsigned char ${NAME}[] = {\n${body}};\n"
                  "const std::size_t ${NAME}_size = ${bytes};\n"
                  "}  // namespace strata::kernels\n")
