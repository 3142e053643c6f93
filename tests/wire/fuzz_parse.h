// The body of the parse fuzzer, callable from GoogleTest as well as from libFuzzer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/packet.h"

namespace softrdma::wire::testing {

// Parses `data`, and on success reads every field, the payload and the ICRC, and
// checks that re-encoding the decoded fields reproduces headers and payload.
// Aborts on a broken invariant; returns what parse_packet said.
ParseError fuzz_parse_one(const uint8_t* data, size_t size);

}  // namespace softrdma::wire::testing
