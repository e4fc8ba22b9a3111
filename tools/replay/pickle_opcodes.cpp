#include "pickle_opcodes.hpp"

#include <array>
#include <utility>

namespace strata::replay {

namespace {

// Protocols 0 to 5, in opcode order.
constexpr std::array<std::pair<unsigned char, const char*>, 68> names{{
    {'(', "MARK"},          {')', "EMPTY_TUPLE"},
    {'.', "STOP"},          {'0', "POP"},
    {'1', "POP_MARK"},      {'2', "DUP"},
    {'B', "BINBYTES"},      {'C', "SHORT_BINBYTES"},
    {'F', "FLOAT"},         {'G', "BINFLOAT"},
    {'I', "INT"},           {'J', "BININT"},
    {'K', "BININT1"},       {'L', "LONG"},
    {'M', "BININT2"},       {'N', "NONE"},
    {'P', "PERSID"},        {'Q', "BINPERSID"},
    {'R', "REDUCE"},        {'S', "STRING"},
    {'T', "BINSTRING"},     {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},       {'X', "BINUNICODE"},
    {']', "EMPTY_LIST"},    {'a', "APPEND"},
    {'b', "BUILD"},         {'c', "GLOBAL"},
    {'d', "DICT"},          {'e', "APPENDS"},
    {'g', "GET"},           {'h', "BINGET"},
    {'i', "INST"},          {'j', "LONG_BINGET"},
    {'l', "LIST"},          {'o', "OBJ"},
    {'p', "PUT"},           {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},   {'s', "SETITEM"},
    {'t', "TUPLE"},         {'u', "SETITEMS"},
    {'}', "EMPTY_DICT"},    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},       {0x82, "EXT1"},
    {0x83, "EXT2"},         {0x84, "EXT4"},
    {0x85, "TUPLE1"},       {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},       {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},     {0x8a, "LONG1"},
    {0x8b, "LONG4"},        {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},  {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"},        {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},  {0x98, "READONLY_BUFFER"},
}};

}  // namespace

const char* pickle_opcode_name(unsigned char op) noexcept {
  for (const auto& [code, name] : names) {
    if (code == op) return name;
  }
  return "not an opcode";
}

}  // namespace strata::replay
