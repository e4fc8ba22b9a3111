// The id exchange of the torchrun bootstrap: rank 0 listens at
// (addr, port) and sends its 128-byte id to each other rank; the others
// connect (retrying while rank 0 is not up yet) and receive it.
//
// Wire format (little-endian): a rank sends "STRB", protocol 1, its rank
// and the world size (4 x 4 bytes); rank 0 answers "STRB", 0 (accepted) or
// a nonzero reason (1: another world size, 2: a rank out of range or seen
// twice), then, when accepted, the id (128 bytes).
//
// Rank 0 gives a connection 5 s to say hello and take the id, then drops
// it (a stray connection cannot stall the others).
//
// Cost: one connection per rank, once. Blocking sockets with poll timeouts;
// nothing here runs after the communicator exists.
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "strata/error.hpp"

namespace strata {

using bootstrap_id = std::array<char, 128>;

/// Rank 0: serves `id` to ranks 1..world_size-1 at addr:port. Returns once
/// all have it. Errors: comm_error (cannot listen; ranks missing at the
/// deadline, naming them).
status serve_bootstrap_id(const std::string& addr, int port, int world_size, const bootstrap_id& id,
                          std::chrono::milliseconds timeout);

/// Ranks > 0: fetches the id from rank 0 at addr:port. Errors: comm_error
/// (no rank 0 before the deadline, a world size rank 0 refuses, a broken
/// connection).
result<bootstrap_id> fetch_bootstrap_id(const std::string& addr, int port, int rank, int world_size,
                                        std::chrono::milliseconds timeout);

}  // namespace strata
